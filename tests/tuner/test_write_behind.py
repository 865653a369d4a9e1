"""tuner/write_behind.py: the database writes a run makes after storing a result, done in order on a
thread of their own, their errors raised in the run, their retries their own even while the run's
thread holds the job's lock."""
from __future__ import annotations

import threading
import time

import pytest

from db import migrate
from db.retry import DatabaseUnavailable
from tuner.run_context import RunContext
from tuner.write_behind import WriteBehind


@pytest.fixture
def ctx(tmp_path):
    url = f"sqlite:///{tmp_path / 'blocktune.db'}"
    migrate.upgrade(url)
    c = RunContext(url, 1, worker_id="w1")        # a service worker's: section() takes the job's lock
    yield c
    c.close()


def test_writes_run_in_order_on_another_thread_and_drain_waits_for_them(ctx):
    wb = WriteBehind(ctx)
    done, threads = [], set()

    def write(i):
        def fn():
            time.sleep(0.01 if i % 2 else 0.03)   # uneven: only one writer keeps them in order
            threads.add(threading.get_ident())
            done.append(i)
        return fn

    for i in range(20):
        wb.submit(write(i), f"write {i}")
    wb.drain()
    assert done == list(range(20))
    assert threads and threading.get_ident() not in threads
    assert ctx.timeline.seconds["record_behind"] > 0.2
    wb.close()


def test_an_error_is_raised_in_the_run_and_stops_the_writes_after_it(ctx):
    wb = WriteBehind(ctx)
    done = []
    wb.submit(lambda: done.append(1), "first")

    def broken():
        raise ValueError("not a database outage")

    wb.submit(broken, "broken")
    wb.submit(lambda: done.append(3), "after the error")
    with pytest.raises(ValueError, match="not a database outage"):
        wb.drain()
    assert done == [1]
    wb.drain()             # raised once
    wb.close()


def test_submit_raises_an_earlier_error(ctx):
    wb = WriteBehind(ctx)
    wb.submit(lambda: 1 / 0, "dividing")
    deadline = time.monotonic() + 10
    while wb._error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(ZeroDivisionError):
        wb.submit(lambda: None, "next")
    wb.close()


def test_a_write_rides_out_an_outage_while_the_run_holds_the_job_lock(ctx):
    """The run's thread inside the job's lock calls database work once (its retry is around the
    whole locked section); the writer's thread holds no lock, so its writes are retried."""
    wb = WriteBehind(ctx)
    calls = []

    def flaky():
        calls.append(threading.get_ident())
        if len(calls) == 1:
            raise DatabaseUnavailable("connection refused")

    with ctx.section():
        wb.submit(flaky, "a write during an outage")
        wb.drain()
    assert len(calls) == 2


def test_close_drops_what_was_not_written(ctx):
    wb = WriteBehind(ctx)
    started, release, done = threading.Event(), threading.Event(), []

    def slow():
        started.set()
        release.wait(10)
        done.append("slow")

    wb.submit(slow, "slow")
    wb.submit(lambda: done.append("dropped"), "queued behind it")
    started.wait(10)
    threading.Timer(0.2, release.set).start()
    wb.close()
    assert done == ["slow"]
