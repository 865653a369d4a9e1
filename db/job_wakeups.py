"""Job wake-ups: telling idle workers that a job may be claimable or joinable now, so that a
submitted job starts at once instead of on a worker's next poll.

`announce(session_or_connection)` is called inside the transaction that makes a job claimable
(created, given back to the queue) or joinable (claimed: the other workers of its GPU model may
join it). It wakes:

- on PostgreSQL, every worker listening on the database, wherever it runs: `pg_notify` on the
  channel `blocktune_jobs`, which PostgreSQL delivers when the transaction commits and never for
  one that rolls back;
- in every case, this process's own `JobWakeups` (the worker threads of `blocktune serve`, next
  to the API that created the job), once the transaction has committed: woken before, a worker
  would not see the row yet. A Session wakes them from its after_commit event; a Connection has
  no such event, so it must come from `begin(engine)` below, which wakes them after its commit.

`JobWakeups` is what an idle worker waits on: `wait(timeout)` returns as soon as a notification
arrives, a job was announced in this process, or `wake()` is called (the worker stopping), and at
the timeout otherwise. The timeout stays the fallback: a job whose lease expired becomes
claimable with no event at all, and on SQLite there is no signal between processes (separate
`blocktune worker` processes on one SQLite file keep polling; workers inside `blocktune serve`
are woken in-process).

On PostgreSQL it LISTENs on its own autocommit psycopg connection (`application_name`
`blocktune-wakeups`). That connection failing or being lost (a database restart,
`pg_terminate_backend`) never stops the worker: it is logged once, waits fall back to their
timeout, and connect again with a capped backoff (first after 1-2 s, then at most every 30 s);
a wait returns True once connected again, since a notification may have been missed meanwhile.
"""
from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
import weakref
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.orm import Session

from db.engine import normalize_url
from db.retry import Backoff

log = logging.getLogger("blocktune.wakeups")

CHANNEL = "blocktune_jobs"
APPLICATION_NAME = "blocktune-wakeups"

# the JobWakeups of this process, woken by announce() after a commit
_live: weakref.WeakSet[JobWakeups] = weakref.WeakSet()
_live_lock = threading.Lock()
# marks a Session whose next commit wakes them
_ANNOUNCED = "blocktune_job_announced"
# the Connections of begin() now open: whether announce() was called in them
_open: dict[Connection, bool] = {}
_open_lock = threading.Lock()


def announce(target: Session | Connection) -> None:
    """Tell idle workers, once this transaction commits, that a job may be claimable or joinable."""
    if isinstance(target, Session):
        if target.get_bind().dialect.name == "postgresql":
            target.execute(sa.select(sa.func.pg_notify(CHANNEL, "")))
        if not target.info.get(_ANNOUNCED):
            # one listener per transaction; a rollback leaves it for the session's next commit (a
            # wake with nothing new to claim, which is harmless)
            target.info[_ANNOUNCED] = True
            sa.event.listen(target, "after_commit", _wake_after_session_commit, once=True)
        return
    with _open_lock:
        if target not in _open:
            raise TypeError("announce() on a Connection needs a transaction from db.job_wakeups.begin(engine): "
                            "a plain Connection cannot wake this process's workers after its commit")
    if target.dialect.name == "postgresql":
        target.execute(sa.select(sa.func.pg_notify(CHANNEL, "")))
    with _open_lock:
        _open[target] = True


def _wake_after_session_commit(session: Session) -> None:
    session.info.pop(_ANNOUNCED, None)
    wake_local()


@contextlib.contextmanager
def begin(engine: Engine) -> Iterator[Connection]:
    """`engine.begin()` in which `announce(connection)` may be called: this process's waiters are
    woken once it committed (not when it rolled back)."""
    with engine.begin() as c:
        with _open_lock:
            _open[c] = False
        try:
            yield c
        finally:
            with _open_lock:
                announced = _open.pop(c)
    if announced:
        wake_local()


def wake_local() -> None:
    """Wake every JobWakeups of this process."""
    with _live_lock:
        waiters = list(_live)
    for w in waiters:
        w.wake()


class JobWakeups:
    """What one worker waits on between claims (see the module's docstring)."""

    def __init__(self, database_url: str, *, reconnect_initial: float = 2.0, reconnect_cap: float = 30.0,
                 connect_timeout: int = 5):
        self._url = make_url(normalize_url(database_url))
        self._postgres = self._url.get_backend_name() == "postgresql"
        self._connect_timeout = connect_timeout
        self._backoff = Backoff(initial=reconnect_initial, cap=reconnect_cap)
        self._conn = None                   # psycopg.Connection, LISTENing
        self._fd = -1                       # its socket (libpq closes it when the connection is lost)
        self._next_connect = 0.0            # time.monotonic() of the next connection attempt
        self._lost = False                  # logged as lost; the next connection says it is back
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._lock = threading.Lock()       # wake() from other threads against close()
        self._closed = False
        with _live_lock:
            _live.add(self)
        if self._postgres:
            self._connect()

    @property
    def listening(self) -> bool:
        """Whether notifications from other processes reach it now (PostgreSQL, connected)."""
        return self._conn is not None

    # -- the LISTEN connection -------------------------------------------------------------------
    def _connect(self) -> bool:
        import psycopg

        _, params = self._url.get_dialect()().create_connect_args(self._url)
        params = {"connect_timeout": self._connect_timeout, **params, "application_name": APPLICATION_NAME,
                  "autocommit": True}
        # a connection dropped without a word (a network partition) is noticed by TCP keepalives
        # instead of never: meanwhile the waits fall back to their timeout
        params.update(keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3)
        try:
            conn = psycopg.connect(**params)
            try:
                conn.execute(f"LISTEN {CHANNEL}")
            except BaseException:
                conn.close()
                raise
        except Exception as exc:
            self._failed(exc)
            return False
        self._conn, self._fd = conn, conn.fileno()
        self._backoff.reset()
        if self._lost:
            self._lost = False
            log.warning("listening for job wake-ups again (%s)", self._where())
        return True

    def _failed(self, exc: BaseException) -> None:
        self._drop()
        delay = self._backoff.next()
        self._next_connect = time.monotonic() + delay
        if not self._lost:
            self._lost = True
            first_line = (str(exc).strip().splitlines() or [""])[0][:200]
            log.warning("cannot listen for job wake-ups on %s (%s: %s): polling meanwhile; trying again in %.0f s",
                        self._where(), type(exc).__name__, first_line, delay)
        else:
            log.debug("job wake-ups still unavailable (%s); trying again in %.0f s", exc, delay)

    def _where(self) -> str:
        return self._url.render_as_string(hide_password=True)

    def _drop(self) -> None:
        conn, self._conn, self._fd = self._conn, None, -1
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _drain_notifications(self) -> int:
        """Read what the server sent; the number of notifications (raises when the connection is lost)."""
        from psycopg import pq

        pgconn = self._conn.pgconn
        pgconn.consume_input()
        n = 0
        while pgconn.notifies() is not None:
            n += 1
        if pgconn.status != pq.ConnStatus.OK:
            raise ConnectionError(f"connection status {pgconn.status.name}")
        return n

    # -- waiting -----------------------------------------------------------------------------------
    def wait(self, timeout: float) -> bool:
        """Block until a job may be claimable or joinable (True) or `timeout` seconds passed (False).
        Whatever was pending is drained before it returns. A lost LISTEN connection is connected
        again within the wait once its backoff has passed."""
        deadline = time.monotonic() + max(0.0, timeout)
        woke = False
        while True:
            now = time.monotonic()
            if self._postgres and self._conn is None and now >= self._next_connect:
                woke = self._connect() or woke     # back: a notification may have been missed meanwhile
            listening = self._conn is not None
            fds = [self._read, self._fd] if listening else [self._read]
            remaining = 0.0 if woke else max(0.0, deadline - now)
            if self._postgres and not listening:
                remaining = min(remaining, max(0.0, self._next_connect - now))
            try:
                ready, _, _ = select.select(fds, [], [], remaining)
            except (OSError, ValueError) as exc:  # the connection's socket went away under us
                if not listening:
                    raise
                self._failed(exc)
                continue
            if self._read in ready:
                self._drain_pipe()
                woke = True
            if listening and (self._fd in ready or woke):
                try:
                    woke = self._drain_notifications() > 0 or woke
                except Exception as exc:
                    self._failed(exc)
            if woke:
                return True
            if time.monotonic() >= deadline:
                return False

    def pending(self) -> bool:
        """Whether a wake-up came since the last wait (drained now): for a worker busy on a job to
        look, between trials, whether a job may be waiting. Never blocks and never connects again
        (a lost connection waits for the next `wait`)."""
        with self._lock:
            if self._closed:
                return False
            listening = self._conn is not None
            fds = [self._read, self._fd] if listening else [self._read]
            try:
                ready, _, _ = select.select(fds, [], [], 0.0)
            except (OSError, ValueError) as exc:
                if listening:
                    self._failed(exc)
                return False
            woke = False
            if self._read in ready:
                self._drain_pipe()
                woke = True
            if listening and self._fd in ready:
                try:
                    woke = self._drain_notifications() > 0 or woke
                except Exception as exc:
                    self._failed(exc)
            return woke

    def _drain_pipe(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 512):
                pass

    def wake(self) -> None:
        """Make the current (or next) wait return True at once."""
        with self._lock:
            if self._closed:
                return
            with contextlib.suppress(BlockingIOError):    # full: a wake is pending already
                os.write(self._write, b"\0")

    def close(self) -> None:
        with _live_lock:
            _live.discard(self)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._read)
            os.close(self._write)
        self._drop()

    def __enter__(self) -> JobWakeups:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
