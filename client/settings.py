"""Every switch the client reads from the environment, in one place.

| setting | variable | default | |
|---|---|---|---|
| service_url | BLOCKTUNE_SERVICE_URL | none | the tuning service: launches ask it for configs; `blocktune submit`'s default |
| token | BLOCKTUNE_TOKEN | none | API token sent with requests (publishing and submitting need one) |
| publish | BLOCKTUNE_PUBLISH | off | send configs that kernels tuned themselves to the service |
| submit_on_miss | BLOCKTUNE_SUBMIT_ON_MISS | off | submit a launch the service had no config for as a tuning job |
| lookup_timeout_s | BLOCKTUNE_LOOKUP_TIMEOUT | 0.5 | longest a launch waits for the service |
| lookup_ttl_s | BLOCKTUNE_LOOKUP_TTL | 86400 | age up to which a config cached on disk is used without asking |
| lookup_retry_after_s | BLOCKTUNE_LOOKUP_RETRY_AFTER | 60 | after the service was unreachable, not asked again for this long |
| submit_timeout_s | BLOCKTUNE_SUBMIT_TIMEOUT | 10 | a job submission's own timeout (the service checks the kernel first) |
| cache_dir | BLOCKTUNE_CACHE_DIR | the user cache dir | where looked-up configs are kept on disk (`lookup/`), beside the compiler's cache |

Each is read from the environment when it is used (a launch-time lookup reads a few per lookup, a
dictionary access each), so a change of `os.environ` counts at once. This module imports nothing:
the compiler plug-in reads it before it loads httpx or pydantic.
"""
from __future__ import annotations

import os

_TRUE = ("1", "true", "yes", "on")


def _text(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def _number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class ClientSettings:
    @property
    def service_url(self) -> str | None:
        url = (_text("BLOCKTUNE_SERVICE_URL") or "").rstrip("/")
        return url or None

    @property
    def token(self) -> str | None:
        return _text("BLOCKTUNE_TOKEN")

    @property
    def publish(self) -> bool:
        return (_text("BLOCKTUNE_PUBLISH") or "").lower() in _TRUE

    @property
    def submit_on_miss(self) -> bool:
        return (_text("BLOCKTUNE_SUBMIT_ON_MISS") or "").lower() in _TRUE

    @property
    def lookup_timeout_s(self) -> float:
        return _number("BLOCKTUNE_LOOKUP_TIMEOUT", 0.5)

    @property
    def lookup_ttl_s(self) -> float:
        return _number("BLOCKTUNE_LOOKUP_TTL", 86400.0)

    @property
    def lookup_retry_after_s(self) -> float:
        return _number("BLOCKTUNE_LOOKUP_RETRY_AFTER", 60.0)

    @property
    def submit_timeout_s(self) -> float:
        return _number("BLOCKTUNE_SUBMIT_TIMEOUT", 10.0)

    @property
    def cache_dir(self) -> str | None:
        return _text("BLOCKTUNE_CACHE_DIR")


settings = ClientSettings()
