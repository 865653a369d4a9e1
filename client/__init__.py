"""blocktune client: `Client(url, token)` and the launch-time config lookup (`client.lookup`)."""
from client.client import Client, ServiceError, ServiceUnavailable

__all__ = ["Client", "ServiceError", "ServiceUnavailable"]
