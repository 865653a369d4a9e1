"""Riding out database outages: which errors mean "the database is unreachable right now", and a
retry loop with capped exponential backoff and jitter that logs the outage once, then while it
lasts, then when it ends.

A worker calls through this wherever it touches the database (claiming, heartbeats, the tuner's
writes), so that a PostgreSQL restart or a network blip pauses its work instead of ending it.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Callable, TypeVar

import sqlalchemy as sa

T = TypeVar("T")

_SQLITE_TRANSIENT = ("database is locked", "database is busy", "unable to open database file", "disk i/o error")


class DatabaseUnavailable(Exception):
    """The database stayed unreachable and the caller asked to give up (e.g. the worker is stopping)."""


def is_unavailable(exc: BaseException) -> bool:
    """True when `exc` (or what it wraps: Optuna's StorageInternalError wraps SQLAlchemy's errors)
    says the database could not be reached or dropped the connection, rather than that the
    statement itself is wrong."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, DatabaseUnavailable):
            return True
        if isinstance(e, sa.exc.DBAPIError) and e.connection_invalidated:
            return True
        if isinstance(e, sa.exc.TimeoutError):       # no pooled connection came free
            return True
        if isinstance(e, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            if _is_sqlite(e):   # SQLite's OperationalError also means "no such table" and the like
                return any(m in str(e.orig).lower() for m in _SQLITE_TRANSIENT)
            return True
        e = e.__cause__ or e.__context__
    return False


def _is_sqlite(e: sa.exc.DBAPIError) -> bool:
    return type(e.orig).__module__.startswith("sqlite3")


class Backoff:
    """Delays growing ×2 from `initial` up to `cap`, each scaled by a random factor in [0.5, 1]
    (workers that lost the database together do not all come back in the same instant)."""

    def __init__(self, initial: float = 0.25, cap: float = 5.0, rng: random.Random | None = None):
        self.initial, self.cap = initial, cap
        self._rng = rng or random.Random()
        self._next = initial

    def next(self) -> float:
        d = self._next
        self._next = min(self.cap, self._next * 2)
        return d * self._rng.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._next = self.initial


class Outage:
    """Logs one outage as it is seen by one caller: its start, a line every `every` seconds while
    it lasts, and its end with its length."""

    def __init__(self, log: logging.Logger, what: str, every: float = 30.0):
        self.log, self.what, self.every = log, what, every
        self.started: float | None = None
        self._last_log = 0.0

    def failed(self, exc: BaseException, delay: float) -> None:
        now = time.monotonic()
        if self.started is None:
            self.started = self._last_log = now
            self.log.warning("database unavailable while %s (%s: %s); retrying in %.1f s", self.what,
                             type(exc).__name__, _first_line(exc), delay)
        elif now - self._last_log >= self.every:
            self._last_log = now
            self.log.warning("database still unavailable while %s after %.0f s (%s); retrying",
                             self.what, now - self.started, _first_line(exc))

    def recovered(self) -> None:
        if self.started is not None:
            self.log.warning("database reachable again after %.1f s (%s)", time.monotonic() - self.started, self.what)
            self.started = None


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def retry(fn: Callable[[], T], what: str, *, log: logging.Logger, give_up: Callable[[], bool] | None = None,
          initial: float = 0.25, cap: float = 5.0, sleep: Callable[[float], object] | None = None) -> T:
    """`fn()`, called again after each database outage error until it succeeds. Any other error
    propagates at once. While the database is unreachable and `give_up()` turns true, raises
    DatabaseUnavailable. `sleep(seconds)` waits between attempts (an Event's wait, so that a stop
    wakes it: then `give_up` is checked at once)."""
    backoff = Backoff(initial, cap)
    outage = Outage(log, what)
    wait = sleep or time.sleep
    while True:
        try:
            result = fn()
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            if give_up is not None and give_up():
                raise DatabaseUnavailable(f"database unavailable while {what}; gave up: {_first_line(exc)}") from exc
            delay = backoff.next()
            outage.failed(exc, delay)
            wait(delay)
            continue
        outage.recovered()
        return result
