"""db.retry against real databases: which errors are an outage, and the retry loop."""
from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time

import optuna
import pytest
import sqlalchemy as sa

from db.engine import make_engine
from db.retry import Backoff, DatabaseUnavailable, is_unavailable, retry
from tests.conftest import _free_port

log = logging.getLogger("test.retry")


def _error(fn) -> Exception:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("no error")


def test_postgresql_outage_errors_and_statement_errors(postgres_url):
    refused = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{_free_port()}/x")
    assert is_unavailable(_error(lambda: refused.connect().close()))           # nobody listens
    refused.dispose()

    engine = make_engine(postgres_url, pool_pre_ping=False)
    with engine.connect() as c:
        assert not is_unavailable(_error(lambda: c.execute(sa.text("SELEC 1"))))   # a wrong statement
    with engine.connect() as c:
        c.execute(sa.text("CREATE TABLE t (x int primary key)"))
        c.execute(sa.text("INSERT INTO t VALUES (1)"))
        c.commit()
        assert not is_unavailable(_error(lambda: c.execute(sa.text("INSERT INTO t VALUES (1)"))))
    with engine.connect() as c:          # the server ends the session (a restart does that)
        pid = c.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as killer:
            killer.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        exc = _error(lambda: c.execute(sa.text("SELECT 1")))
        assert is_unavailable(exc), exc
    engine.dispose()


def test_optuna_wraps_the_outage_and_it_is_still_seen(postgres_url):
    storage = optuna.storages.RDBStorage(postgres_url, engine_kwargs={"pool_pre_ping": False})
    storage.get_all_studies()            # a pooled connection
    admin = make_engine(postgres_url)
    with admin.connect() as c:           # every other session of this database ends
        c.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()"))
    admin.dispose()
    exc = _error(storage.get_all_studies)
    assert isinstance(exc, optuna.exceptions.StorageInternalError) and is_unavailable(exc)
    storage.engine.dispose()


def _impatient_sqlite(path):
    """SQLite that reports "database is locked" after 20 ms (db.engine's waits 30 s)."""
    return sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.02})


def test_sqlite_locked_is_an_outage_a_missing_table_is_not(tmp_path):
    path = tmp_path / "x.db"
    engine = _impatient_sqlite(path)
    with engine.begin() as c:
        c.execute(sa.text("CREATE TABLE t (x int)"))
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")

    def insert():
        with engine.begin() as c:
            c.execute(sa.text("INSERT INTO t VALUES (1)"))

    exc = _error(insert)
    assert "locked" in str(exc) and is_unavailable(exc)
    holder.rollback()
    holder.close()
    with engine.connect() as c:
        assert not is_unavailable(_error(lambda: c.execute(sa.text("SELECT * FROM nothing_here"))))
    engine.dispose()


def test_retry_waits_out_the_outage_and_logs_it(tmp_path, caplog):
    """A writer blocked by another holding SQLite's lock for 0.6 s: retried until the lock goes,
    with the outage logged once when it starts and once when it ends."""
    path = tmp_path / "x.db"
    engine = _impatient_sqlite(path)
    with engine.begin() as c:
        c.execute(sa.text("CREATE TABLE t (x int)"))
    holder = sqlite3.connect(path, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(0.6, holder.rollback).start()
    calls = []

    def write():
        calls.append(time.monotonic())
        with engine.begin() as c:
            c.execute(sa.text("INSERT INTO t VALUES (1)"))
        return "written"

    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="test.retry"):
        assert retry(write, "writing t", log=log, initial=0.05, cap=0.2) == "written"
    assert time.monotonic() - t0 >= 0.55 and len(calls) >= 3
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("database unavailable while writing t")
    assert messages[-1].startswith("database reachable again after") and len(messages) == 2
    holder.close()
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM t")).scalar_one() == 1
    engine.dispose()


def test_retry_gives_up_when_asked_and_passes_other_errors_at_once(tmp_path):
    path = tmp_path / "x.db"
    engine = _impatient_sqlite(path)
    with engine.begin() as c:
        c.execute(sa.text("CREATE TABLE t (x int)"))
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")

    def write():
        with engine.begin() as c:
            c.execute(sa.text("INSERT INTO t VALUES (1)"))

    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    with pytest.raises(DatabaseUnavailable, match="writing t"):
        retry(write, "writing t", log=log, give_up=stop.is_set, initial=0.05, cap=0.1, sleep=stop.wait)
    holder.rollback()
    holder.close()
    calls = []

    def wrong():
        calls.append(1)
        with engine.connect() as c:
            c.execute(sa.text("SELECT * FROM nothing_here"))

    with pytest.raises(sa.exc.OperationalError, match="no such table"):
        retry(wrong, "reading", log=log)
    assert calls == [1]
    engine.dispose()


def test_backoff_grows_to_its_cap_with_jitter():
    b = Backoff(initial=0.25, cap=2.0, rng=random.Random(7))
    delays = [b.next() for _ in range(8)]
    for d, nominal in zip(delays, [0.25, 0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0]):
        assert nominal * 0.5 <= d <= nominal
    assert len(set(delays)) == len(delays)          # jittered
    b.reset()
    assert b.next() <= 0.25
