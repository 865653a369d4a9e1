"""Worker names: one row per live worker. The default name is `<node>-gpuN` (stable across
restarts); two live workers never share a row (the default name takes a suffix, an explicit one
is refused while its holder's heartbeat moves), and a stopped or dead worker's row is taken over."""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import subprocess
import sys
import threading

import pytest
import sqlalchemy as sa

from db.engine import make_engine
from db.models import Worker as WorkerRow, utcnow
from service.worker import Worker, WorkerNameInUse, default_worker_name


def rows(url) -> dict[str, str]:
    engine = make_engine(url)
    with engine.connect() as c:
        got = {r.name: r.state for r in c.execute(sa.select(WorkerRow.name, WorkerRow.state))}
    engine.dispose()
    return got


def make(url, **kw) -> Worker:
    return Worker(url, interpret=True, heartbeat_seconds=0.3, poll_seconds=0.1, **kw)


@contextlib.contextmanager
def live_worker(url, name: str, alive_seconds: float):
    """A worker running in a thread (registered, heartbeating) until the block ends."""
    live = make(url, name=name, alive_seconds=alive_seconds)
    thread = threading.Thread(target=live.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if live.worker_id is not None:
                break
            threading.Event().wait(0.05)
        yield live
    finally:
        live.stop()
        thread.join(10)


def test_default_name_is_node_and_device(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_NODE", "rack4-node17")
    assert default_worker_name(3) == "rack4-node17-gpu3"
    assert default_worker_name(0, interpret=True) == "rack4-node17-cpu0"
    monkeypatch.delenv("BLOCKTUNE_NODE")

    assert default_worker_name(1) == f"{socket.gethostname()}-gpu1"


def test_two_live_workers_with_the_default_name_get_two_rows(db_url, monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_NODE", "hostA")
    a, b = make(db_url), make(db_url)
    a.register()
    b.register()
    try:
        assert (a.name, b.name) == ("hostA-cpu0", "hostA-cpu0-2")
        assert a.worker_id != b.worker_id
        assert rows(db_url) == {"hostA-cpu0": "idle", "hostA-cpu0-2": "idle"}
    finally:
        a.engine.dispose()
        b.engine.dispose()


def test_a_restarted_worker_takes_its_stopped_row_back(db_url, monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_NODE", "hostB")
    first = make(db_url, exit_when_idle=True)
    first.run()                       # registers, finds nothing, marks itself stopped
    assert rows(db_url) == {"hostB-cpu0": "stopped"}
    again = make(db_url)
    again.register()
    again.engine.dispose()
    assert (again.name, again.worker_id) == ("hostB-cpu0", first.worker_id)
    assert rows(db_url) == {"hostB-cpu0": "idle"}


def test_a_dead_workers_row_is_taken_over_once_its_heartbeat_is_stale(db_url):
    """A killed container leaves its row `idle` with a recent heartbeat; the restarted worker with
    the same explicit name waits for it to go stale, then takes it (no second row)."""
    dead = make(db_url, name="gpuhost-gpu0", alive_seconds=1.5)
    dead.register()                   # and never heartbeats again: it died
    dead.engine.dispose()
    started = utcnow()
    again = make(db_url, name="gpuhost-gpu0", alive_seconds=1.5)
    again.register()
    again.engine.dispose()
    assert again.worker_id == dead.worker_id
    assert utcnow() - started >= dt.timedelta(seconds=1)
    assert rows(db_url) == {"gpuhost-gpu0": "idle"}


def test_an_explicit_name_held_by_a_live_worker_is_refused(db_url):
    with live_worker(db_url, "gpuhost-gpu0", alive_seconds=3):
        second = make(db_url, name="gpuhost-gpu0", alive_seconds=3)
        with pytest.raises(WorkerNameInUse, match="gpuhost-gpu0.*BLOCKTUNE_NODE"):
            second.register()
        second.engine.dispose()
        assert rows(db_url) == {"gpuhost-gpu0": "idle"}
    assert rows(db_url) == {"gpuhost-gpu0": "stopped"}


def test_the_worker_command_refuses_a_live_workers_name(db_url):
    with live_worker(db_url, "gpuhost-gpu0", alive_seconds=2):
        p = subprocess.run([sys.executable, "-m", "service.cli", "worker", "--server-db", db_url, "--interpret",
                            "--name", "gpuhost-gpu0", "--no-migrate"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "BLOCKTUNE_WORKER_ALIVE_SECONDS": "2"})
    assert p.returncode == 2, p.stderr
    assert "blocktune worker: a live worker is already registered as 'gpuhost-gpu0'" in p.stderr
    assert "BLOCKTUNE_NODE" in p.stderr
