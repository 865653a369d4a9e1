"""blocktune client: `Client(url, token)`, the launch-time config lookup (`client.lookup`) and the
compiler plug-in that uses it (`client.compiler_plugin`).

`Client`, `ServiceError` and `ServiceUnavailable` load on first use: the compiler imports the
plug-in at its first autotuning event, and that must not cost httpx and pydantic when no service
URL is set.
"""
from __future__ import annotations

__all__ = ["Client", "ServiceError", "ServiceUnavailable"]


def __getattr__(name: str):
    if name in __all__:
        from client import client as _client  # noqa: PLC0415 - import time (see the module doc)
        return getattr(_client, name)
    raise AttributeError(f"module 'client' has no attribute {name!r}")
