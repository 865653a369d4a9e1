"""A mutex per job, shared by every process and thread that works on the job.

Workers sharing a job take it where the database cannot arbitrate for them: on SQLite around "count
the trials spent and in flight, then ask Optuna for one more" (Optuna pops its queue there with a
read and a write in separate transactions), and around failing a resumed job's orphaned trials.
The trial budget itself is kept by claims (tuner/trial_claims.py), and a result is stored only
while its trial is RUNNING in one transaction (tuner/recording.py), without this lock.

- PostgreSQL: a transaction-level advisory lock (`pg_advisory_xact_lock(namespace, job id)`) on a
  connection of its own. It blocks nothing else: Optuna's writes and ours go through other
  connections while it is held, and it dies with the connection (a killed worker holds nothing).
- SQLite: the database's own write lock cannot be held here, because Optuna writes through its
  own connection in between; an exclusive `flock` on a file beside the database serves instead
  (every process using a SQLite file is on its host). It is released when the process dies. One
  file serves all the jobs of a database: the sections it guards are short, and SQLite has one
  writer anyway.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Engine

# the first key of the two-key advisory lock; the second is the job id
PG_NAMESPACE = 0x626C6B74 & 0x7FFFFFFF   # "blkt"

_memory_locks: dict[int, threading.Lock] = {}
_memory_guard = threading.Lock()


def lock_file(engine: Engine) -> str | None:
    """The lock file of a SQLite database file (None for an in-memory database)."""
    db = engine.url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return f"{db}.jobs.lock"


@contextlib.contextmanager
def job_lock(engine: Engine, job_id: int) -> Iterator[None]:
    """Hold the job's lock for the duration of the `with` block (not reentrant: a second
    `job_lock` of the same job in the same thread waits for ever)."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as c:
            c.execute(sa.select(sa.func.pg_advisory_xact_lock(PG_NAMESPACE, job_id)))
            try:
                yield
            finally:
                try:
                    c.rollback()          # ends the transaction: releases the lock
                except sa.exc.DBAPIError:
                    pass                  # the connection is gone, and the lock with it
        return
    path = lock_file(engine)
    if path is None:   # one process: a lock per job is enough
        with _memory_guard:
            lock = _memory_locks.setdefault(job_id, threading.Lock())
        with lock:
            yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        # flock, not fcntl's record locks: those belong to the process, so two threads of one
        # process would not exclude each other; flock's belong to the open file (one per call)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
