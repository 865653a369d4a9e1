"""Verified API tokens, remembered for a few seconds so that a request carrying a token costs no
database query (and a lookup with a token can be answered by the fast path on the event loop).

Keyed by the token's sha256 hex digest, as the database stores it: the clear token is not kept.
Only tokens found valid are remembered, so the cache holds at most one entry per live token, and
its size is bounded in bytes besides (an LRU). A revocation takes effect at once in the process
that revoked the token, and within the TTL (`token_cache_ttl_s`, 5 s by default) in other server
processes that had seen it.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from cachetools import LRUCache

from service.core.security import hash_token

# what one remembered token costs: the 64-character key, the snapshot and its strings, the
# cache's own links (measured with tracemalloc: ~450 bytes; rounded up)
ENTRY_BYTES = 600

# a token's last_used_at is written at most this often (a write per request would serialize SQLite)
LAST_USED_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class TokenSnapshot:
    """What a request needs of its token row, immutable so that it can be shared between requests
    and threads."""
    id: int
    name: str
    prefix: str
    scopes: frozenset[str]

    @classmethod
    def of(cls, row) -> "TokenSnapshot":
        return cls(id=row.id, name=row.name, prefix=row.prefix, scopes=frozenset(row.scopes))

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


class VerifiedTokens:
    """Thread-safe: used by the fast path on the event loop and by the routes' dependencies in the
    thread pool. Pure memory: never touches the database.

    An entry older than the TTL is not trusted for a request, with one exception: when the
    database cannot be asked (`last_known()`), a token verified before keeps working, since
    nothing can revoke it meanwhile (a revocation is a database write)."""

    def __init__(self, ttl_s: float, max_bytes: int):
        self._ttl = ttl_s
        self._cache = (LRUCache(maxsize=max_bytes, getsizeof=lambda _: ENTRY_BYTES)
                       if ttl_s > 0 and max_bytes >= ENTRY_BYTES else None)
        self._lock = threading.Lock()
        self._last_used: dict[int, float] = {}

    def _entry(self, clear: str | None):
        if self._cache is None or not clear or len(clear) > 200:
            return None
        digest = hash_token(clear)
        with self._lock:
            return self._cache.get(digest)

    def get(self, clear: str | None) -> TokenSnapshot | None:
        """The snapshot of a token verified less than the TTL ago, else None (then ask the database)."""
        entry = self._entry(clear)
        if entry is None or time.monotonic() - entry[1] >= self._ttl:
            return None
        return entry[0]

    def last_known(self, clear: str | None) -> TokenSnapshot | None:
        """The snapshot of a token verified at any time: for when the database cannot be asked."""
        entry = self._entry(clear)
        return entry[0] if entry is not None else None

    def put(self, clear: str, snapshot: TokenSnapshot) -> None:
        """Remember a token just verified (or, while the database is away, one verified before):
        trusted for the next TTL."""
        if self._cache is None:
            return
        digest = hash_token(clear)
        with self._lock:
            self._cache[digest] = (snapshot, time.monotonic())

    def discard(self, clear: str) -> None:
        """Drop a token the database no longer knows (revoked): not even last_known() returns it."""
        if self._cache is None:
            return
        digest = hash_token(clear)
        with self._lock:
            self._cache.pop(digest, None)

    def forget(self, token_id: int) -> None:
        """Drop a token just revoked through this process (other processes drop it within the TTL)."""
        if self._cache is None:
            return
        with self._lock:
            for digest in [d for d, (snap, _) in self._cache.items() if snap.id == token_id]:
                self._cache.pop(digest, None)

    def use_due(self, token_id: int) -> bool:
        """Whether this token's last_used_at is due to be written (then the caller writes it, in a
        thread, and calls used())."""
        return time.monotonic() - self._last_used.get(token_id, -1e9) > LAST_USED_EVERY_S

    def used(self, token_id: int) -> None:
        self._last_used[token_id] = time.monotonic()

    def fresh(self, clear: str | None) -> TokenSnapshot | None:
        """A token verified less than the TTL ago whose use needs no write now: enough to let a
        request through without leaving the event loop."""
        snap = self.get(clear)
        if snap is None or self.use_due(snap.id):
            return None
        return snap

    @property
    def size(self) -> int:
        return len(self._cache) if self._cache is not None else 0
