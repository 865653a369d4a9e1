"""A worker keeps its GPU child and compile pool warm between jobs (tuner/standby.py), in interpret mode:
jobs in a row on one child and pool, a crashed child replaced for the next job, and no process left
behind when the worker stops."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from service.worker import Worker
from worker_helpers import SPEC, bigger_spec, submit, trials_of


def _process_table() -> dict[int, int]:
    """pid → parent pid of the live processes (from /proc), but multiprocessing's resource tracker,
    which lives as long as the process that started it."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[0] != "Z" and b"resource_tracker" not in cmdline:
            parents[int(entry)] = int(fields[1])
    return parents


def _children_now() -> set[int]:
    me = os.getpid()
    return {pid for pid, ppid in _process_table().items() if ppid == me}


_others: set[int] = set()


@pytest.fixture(autouse=True)
def children_before():
    """What this process had started before the test (in the whole suite: the PostgreSQL server of
    tests/pg.py, other modules' servers) is not the worker's, nor is anything under it."""
    _others.clear()
    _others.update(_children_now())


def _descendants() -> set[int]:
    """This process's live descendants, but the subtrees of the children it had before the test."""
    parents = _process_table()
    found, frontier = set(), {pid for pid, ppid in parents.items() if ppid == os.getpid()} - _others
    while frontier:
        found |= frontier
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
    return found


def _no_descendants_within(seconds: float) -> dict[int, str]:
    """The worker's processes still alive after `seconds` (pid → command line), to name in a failure."""
    deadline = time.monotonic() + seconds
    while (left := _descendants()) and time.monotonic() < deadline:
        time.sleep(0.2)
    named = {}
    for pid in left:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                named[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            pass
    return named


def test_jobs_in_a_row_share_the_warm_child_and_pool_and_a_crash_is_replaced(sqlite_db):
    from tuner.engine import run_job as tune

    url = sqlite_db
    jobs = [submit(url, SPEC) for _ in range(3)]
    seen: dict[int, tuple[dict, set[int]]] = {}

    def run_job(db_url, job_id, **kw):
        standby = kw["standby"]

        def on_event(kind, data):
            if kind != "done":
                return
            seen[job_id] = (data["timeline"], set(standby.pool._pool._processes))
            if job_id == jobs[1]:
                os.kill(data["timeline"]["child_pid"], signal.SIGKILL)    # the child crashes after its last answer

        tune(db_url, job_id, on_event=on_event, **kw)

    w = Worker(url, interpret=True, name="warm", poll_seconds=0.2, exit_when_idle=True, run_job=run_job)
    w.run()
    assert w.jobs_run == jobs
    for j in jobs:
        job, _ = trials_of(url, j)
        assert job["state"] == "succeeded", job["error"]
    (t1, pool1), (t2, pool2), (t3, pool3) = (seen[j] for j in jobs)
    assert t1["child_warm"] and t2["child_warm"] and t3["child_warm"]
    assert t1["child_pid"] == t2["child_pid"] != t3["child_pid"]     # reused, then replaced after the crash
    assert t1["pool_warm"] and pool1 and pool1 == pool2 == pool3
    assert w.standby is None
    assert not _no_descendants_within(20)


def test_shutdown_mid_job_stops_the_child_and_the_pool(sqlite_db):
    url = sqlite_db
    job_id = submit(url, bigger_spec(30))
    w = Worker(url, interpret=True, name="leaver", poll_seconds=0.2, join=False)
    thread = threading.Thread(target=w.run)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(trials_of(url, job_id)[1]) < 2:
            time.sleep(0.2)
        assert _descendants(), "the worker's child and pool should be running"
    finally:
        w.stop()
        thread.join(60)
    assert not thread.is_alive()
    job, rows = trials_of(url, job_id)
    assert job["state"] == "queued" and 2 <= len(rows) < 30
    assert not _no_descendants_within(20)
