"""Job wake-ups (db/job_wakeups.py): an idle worker takes a submitted job at once, not on its next
poll; the second worker of a shared job joins at once; stopping stays prompt; a lost LISTEN
connection costs nothing but promptness until it is back. Workers here poll every 30 s, so
anything under a few seconds was a wake-up."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Callable

import pytest
import sqlalchemy as sa

from db import job_wakeups, repo
from db.engine import make_engine, session_factory
from db.job_wakeups import APPLICATION_NAME, CHANNEL, JobWakeups
from service import worker as worker_module
from service.worker import Worker
from svc_helpers import ROOT

POLL = 30.0
PROMPT = 5.0      # well under POLL: only a wake-up gets there


@pytest.fixture
def pg_db(postgres_server, pg_template):
    """A migrated PostgreSQL database of its own."""
    from tests.pg import scratch_database

    with scratch_database(postgres_server, pg_template, prefix="w") as url:
        yield url


class SeenWaiting(JobWakeups):
    """The workers' JobWakeups, telling the test when a worker began waiting: a job created after
    that was not there at its last look, so only a wake-up (or the 30 s poll) brings it."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.waiting = threading.Event()
        self.waits = 0
        self.cond = threading.Condition()

    def wait(self, timeout: float) -> bool:
        with self.cond:
            self.waits += 1
            self.cond.notify_all()
        self.waiting.set()
        return super().wait(timeout)


@pytest.fixture(autouse=True)
def _seen_waiting(monkeypatch):
    monkeypatch.setattr(worker_module, "JobWakeups", SeenWaiting)


@pytest.fixture
def no_local_wakeups(monkeypatch):
    """Only PostgreSQL's NOTIFY can wake a worker: as if the job came from another process."""
    monkeypatch.setattr(job_wakeups, "wake_local", lambda: None)


def create_job(url: str, *, commit: bool = True) -> int:
    """A queued job through db.repo (what the API and `blocktune tune` call), in this process."""
    eng = make_engine(url)
    try:
        with session_factory(eng)() as s:
            job = repo.submit_job(s, fingerprint=f"k{time.time_ns()}", kernel_name="k", source="", compiler_version="0",
                                  spec={})
            job_id = job.id
            s.commit() if commit else s.rollback()
        return job_id
    finally:
        eng.dispose()


_CREATE_ELSEWHERE = """
import sys, time
from db import repo
from db.engine import make_engine, session_factory
with session_factory(make_engine(sys.argv[1]))() as s:
    job = repo.submit_job(s, fingerprint=f"k{time.time_ns()}", kernel_name="k", source="", compiler_version="0",
                          spec={})
    s.commit()
    print(job.id)
"""


def create_job_in_another_process(url: str) -> int:
    out = subprocess.run([sys.executable, "-c", _CREATE_ELSEWHERE, url], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


class Runs:
    """A fake `run_job` for every worker: records who ran which job, and when. The first worker on
    a job holds it (running, its lease renewed) until a second one has joined or `hold` passed."""

    def __init__(self, hold: float = 0.0):
        self.hold = hold
        self.lock = threading.Lock()
        self.entered: dict[int, list[tuple[str, float]]] = {}
        self.cond = threading.Condition(self.lock)

    def __call__(self, db_url, job_id, *, worker_id, should_stop, **kw):
        with self.cond:
            self.entered.setdefault(job_id, []).append((worker_id, time.monotonic()))
            self.cond.notify_all()
            deadline = time.monotonic() + self.hold
            # should_stop() notifies nobody: looked at every 50 ms
            while len(self.entered[job_id]) < 2 and not should_stop() and time.monotonic() < deadline:
                self.cond.wait(0.05)

    def wait_for(self, job_id: int, n: int = 1, timeout: float = 60) -> list[tuple[str, float]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.entered.get(job_id, ())) >= n, timeout=timeout), self.entered
            return list(self.entered[job_id])


def start_worker(url: str, name: str, runs: Runs, **kw) -> Worker:
    w = Worker(url, interpret=True, name=name, lease_seconds=30, heartbeat_seconds=1, poll_seconds=POLL,
               warm=False, run_job=runs, **kw)
    w.start_thread()
    return w


def wait_idle(w: Worker, timeout: float = 60) -> None:
    """Until the worker is registered, found no job and waits for one."""
    deadline = time.monotonic() + timeout
    while w._wakeups is None or not w._wakeups.waiting.is_set():
        assert w._thread.is_alive() and time.monotonic() < deadline, "the worker did not start"
        time.sleep(0.02)


def stop_all(*workers: Worker) -> None:
    for w in workers:
        w.stop()
    for w in workers:
        w.join(30)
        assert not w._thread.is_alive()


def listener_pids(url: str) -> list[int]:
    eng = make_engine(url)
    try:
        with eng.connect() as c:
            return list(c.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :a "
                                          "AND datname = current_database()"), {"a": APPLICATION_NAME}).scalars())
    finally:
        eng.dispose()


def notify(url: str, *payloads: str) -> None:
    """pg_notify from a plain connection (not announce(): no in-process wake), in one transaction."""
    eng = make_engine(url)
    try:
        with eng.begin() as c:
            for p in payloads:
                c.execute(sa.select(sa.func.pg_notify(CHANNEL, p)))
    finally:
        eng.dispose()


# -- workers --------------------------------------------------------------------------------------

def assert_an_idle_worker_takes_it_at_once(url: str, create: Callable[[str], int]) -> None:
    runs = Runs()
    w = start_worker(url, "prompt", runs)
    try:
        wait_idle(w)
        job_id = create(url)
        created = time.monotonic()
        (who, at), = runs.wait_for(job_id, timeout=POLL - 5)
        assert who == "prompt" and at - created < PROMPT
    finally:
        stop_all(w)


def test_an_idle_worker_takes_a_job_from_another_process_at_once(pg_db):
    assert_an_idle_worker_takes_it_at_once(pg_db, create_job_in_another_process)


def hold_first_claim_until_the_other_waits_again(workers: list[Worker]) -> threading.Event:
    """Makes the claim race happen every time: the first worker to claim a job holds its claim's
    commit until the other worker, woken by the same submission, found nothing (the row is locked;
    not joinable before the commit) and waits again. Returns an event set once that happened."""
    raced = threading.Event()
    claiming = threading.local()

    for w in workers:
        other = next(o for o in workers if o is not w)

        def took_a_row(conn, cursor, statement, *_):
            if statement.lstrip().upper().startswith("UPDATE JOBS") and cursor.rowcount == 1:
                claiming.took = True

        def before_commit(conn, other=other):
            if getattr(claiming, "took", False) and not raced.is_set():
                claiming.took = False
                wakeups = other._wakeups
                with wakeups.cond:
                    seen = wakeups.waits
                    if wakeups.cond.wait_for(lambda: wakeups.waits > seen, timeout=10):
                        raced.set()
            claiming.took = False

        sa.event.listen(w.engine, "after_cursor_execute", took_a_row)
        sa.event.listen(w.engine, "commit", before_commit)
    return raced


def test_the_second_worker_joins_a_shared_job_at_once(pg_db, no_local_wakeups):
    """Both wake for the new job; one claims it, the other claims nothing (the row is locked) and
    finds nothing to join before the claim commits. The claim's own NOTIFY wakes it again, and it
    joins."""
    runs = Runs(hold=20)
    workers = [Worker(pg_db, interpret=True, name=n, lease_seconds=30, heartbeat_seconds=1, poll_seconds=POLL,
                      warm=False, run_job=runs) for n in ("left", "right")]
    raced = hold_first_claim_until_the_other_waits_again(workers)
    for w in workers:
        w.start_thread()
    try:
        for w in workers:
            wait_idle(w)
        job_id = create_job(pg_db)
        created = time.monotonic()
        (first, _), (second, joined_at) = runs.wait_for(job_id, n=2, timeout=POLL - 5)
        assert raced.is_set()                           # the loser was waiting again before the claim committed
        assert {first, second} == {"left", "right"}
        assert joined_at - created < PROMPT
        eng = make_engine(pg_db)
        with eng.connect() as c:
            holder = c.execute(sa.text("SELECT claimed_by FROM jobs WHERE id = :j"), {"j": job_id}).scalar_one()
        eng.dispose()
        assert holder == first != second                # the second one joined: it did not claim
    finally:
        stop_all(*workers)


def test_a_job_given_back_is_taken_by_an_idle_worker_at_once(pg_db, no_local_wakeups):
    """A worker stopping mid-job gives it back; an idle worker (not joining) claims it at once."""
    runs = Runs(hold=60)
    leaver = start_worker(pg_db, "leaver", runs, join=False)
    try:
        wait_idle(leaver)
        job_id = create_job(pg_db)
        runs.wait_for(job_id)
        taker = start_worker(pg_db, "taker", runs, join=False)
        try:
            wait_idle(taker)
            stopped = time.monotonic()
            leaver.stop()
            (_, _), (who, at) = runs.wait_for(job_id, n=2, timeout=POLL - 5)
            assert who == "taker" and at - stopped < PROMPT
        finally:
            stop_all(taker)
    finally:
        stop_all(leaver)


class HoldUntilStopped:
    """A fake `run_job` that stays on its job until the worker's should_stop() says to leave (or 20 s)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.entered: dict[int, list[tuple[str, float]]] = {}
        self.left: dict[tuple[int, str], float] = {}

    def __call__(self, db_url, job_id, *, worker_id, should_stop, **kw):
        with self.cond:
            self.entered.setdefault(job_id, []).append((worker_id, time.monotonic()))
            self.cond.notify_all()
        deadline = time.monotonic() + 20
        while not should_stop() and time.monotonic() < deadline:
            time.sleep(0.02)                 # a trial: should_stop() is asked between trials
        with self.cond:
            self.left[(job_id, worker_id)] = time.monotonic()
            self.cond.notify_all()

    def wait_for(self, job_id: int, n: int = 1, timeout: float = 60) -> list[tuple[str, float]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.entered.get(job_id, ())) >= n, timeout=timeout), self.entered
            return list(self.entered[job_id])


def test_a_worker_that_joined_a_job_leaves_it_for_a_job_no_worker_took(db_url):
    """Two jobs submitted together, the second just after the first's claim woke the idle worker,
    which joined the first: it leaves the first for the second at once (not once the first is
    done), and the worker that claimed the first stays on it."""
    runs = HoldUntilStopped()
    claimer = start_worker(db_url, "claimer", runs)
    joiner = None
    try:
        wait_idle(claimer)
        first = create_job(db_url)
        runs.wait_for(first)
        joiner = start_worker(db_url, "joiner", runs)
        (_, _), (who, _) = runs.wait_for(first, n=2)
        assert who == "joiner"
        assert not joiner.should_stop()                # nothing waits: it stays
        second = create_job(db_url)
        created = time.monotonic()
        (who, at), = runs.wait_for(second, timeout=POLL - 5)
        assert who == "joiner" and at - created < PROMPT
        assert (first, "joiner") in runs.left and (first, "claimer") not in runs.left
        assert claimer.current_job == first and not claimer.should_stop()
        assert first not in joiner._finished_joins     # left, not done: it may join the first again
    finally:
        stop_all(*([claimer] + ([joiner] if joiner else [])))


def test_of_two_workers_that_joined_a_job_one_leaves_for_a_waiting_job(db_url):
    """Each leaving worker claims the waiting job first: one job waiting, one worker leaves."""
    runs = HoldUntilStopped()
    workers = [start_worker(db_url, "claimer", runs)]
    try:
        wait_idle(workers[0])
        first = create_job(db_url)
        runs.wait_for(first)
        workers += [start_worker(db_url, "joiner-a", runs), start_worker(db_url, "joiner-b", runs)]
        runs.wait_for(first, n=3)
        second = create_job(db_url)
        (mover, _), = runs.wait_for(second, timeout=POLL - 5)
        stayer = next(w for w in workers[1:] if w.name != mover)
        assert not stayer.should_stop()               # its wake-up seen, the waiting job taken: it stays
        assert (first, mover) in runs.left and (first, stayer.name) not in runs.left
        assert stayer.current_job == first and workers[0].current_job == first
    finally:
        stop_all(*workers)


def test_a_waiting_job_claimed_by_a_stopping_worker_goes_back_to_the_queue(db_url):
    job_id = create_job(db_url)
    w = Worker(db_url, interpret=True, name="leaver", warm=False, run_job=HoldUntilStopped())
    try:
        w._claimed_next = repo.claim(w.engine, "leaver", "any", 30)
        assert w._claimed_next.job_id == job_id
        w._give_back_claimed_next()
        assert w._claimed_next is None
        with w.engine.connect() as c:
            assert c.execute(sa.text("SELECT state FROM jobs WHERE id = :j"), {"j": job_id}).scalar_one() == "queued"
    finally:
        w.engine.dispose()


def test_sqlite_in_process_a_job_created_beside_the_worker_starts_at_once(sqlite_db):
    """`blocktune serve` on SQLite: the API creates the job in the worker's process."""
    assert_an_idle_worker_takes_it_at_once(sqlite_db, create_job)


def test_stop_wakes_a_waiting_worker(db_url):
    w = start_worker(db_url, "stopper", Runs())
    wait_idle(w)
    t0 = time.monotonic()
    w.stop()
    w.join(10)
    assert not w._thread.is_alive() and time.monotonic() - t0 < 2.0
    assert w._wakeups is None                          # closed


def test_a_worker_whose_listen_connection_is_killed_keeps_working(pg_db, no_local_wakeups, caplog):
    runs = Runs()
    w = start_worker(pg_db, "survivor", runs)
    try:
        wait_idle(w)
        pid, = listener_pids(pg_db)
        eng = make_engine(pg_db)
        with eng.connect() as c:
            assert c.execute(sa.select(sa.func.pg_terminate_backend(pid))).scalar_one()
        eng.dispose()
        deadline = time.monotonic() + 10
        while pid in listener_pids(pg_db):               # gone before the job comes: it cannot pass it on
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # a job submitted while it is gone: found once the worker listens again (1-2 s), not at its poll
        job_id = create_job(pg_db)
        created = time.monotonic()
        (who, at), = runs.wait_for(job_id, timeout=POLL - 5)
        assert who == "survivor" and at - created < PROMPT
        assert w._thread.is_alive()
        new_pid, = listener_pids(pg_db)
        assert new_pid != pid
        # and the new connection delivers: the next job comes at once too
        job2 = create_job(pg_db)
        created = time.monotonic()
        (_, at), = runs.wait_for(job2, timeout=POLL - 5)
        assert at - created < PROMPT
        assert any("cannot listen for job wake-ups" in r.getMessage() for r in caplog.records)
    finally:
        stop_all(w)


# -- JobWakeups itself ----------------------------------------------------------------------------

def test_wait_returns_on_notify_and_drains_them_all(pg_db):
    with JobWakeups(pg_db) as w:
        assert w.listening
        assert w.wait(0.05) is False
        notify(pg_db, "a", "b", "c")                   # delivered together at commit
        t0 = time.monotonic()
        assert w.wait(10) is True and time.monotonic() - t0 < 2
        assert w.wait(0.3) is False                    # all three were drained


def test_wake_returns_the_wait_at_once(database_url):
    with JobWakeups(database_url) as w:
        w.wake()
        w.wake()
        assert w.wait(10) is True
        assert w.wait(0.05) is False                   # the two wakes were one
        threading.Timer(0.2, w.wake).start()
        t0 = time.monotonic()
        assert w.wait(30) is True and time.monotonic() - t0 < 2


def test_announce_wakes_this_process_only_after_the_commit(db_url):
    eng = make_engine(db_url)
    with JobWakeups(db_url) as w, session_factory(eng)() as s:
        job_wakeups.announce(s)
        assert w.wait(0.2) is False                    # not before the commit: the row is not visible yet
        s.commit()
        assert w.wait(0) is True
    eng.dispose()


def test_a_rolled_back_job_wakes_nobody(db_url):
    with JobWakeups(db_url) as w:
        create_job(db_url, commit=False)
        assert w.wait(0.3) is False
        create_job(db_url)
        assert w.wait(5) is True


def test_announce_on_a_connection_needs_begin(sqlite_db):
    eng = make_engine(sqlite_db)
    with JobWakeups(sqlite_db) as w:
        with eng.begin() as c, pytest.raises(TypeError, match="begin"):
            job_wakeups.announce(c)
        with pytest.raises(RuntimeError):
            with job_wakeups.begin(eng) as c:
                job_wakeups.announce(c)
                raise RuntimeError("rolled back")
        assert w.wait(0.1) is False                    # rolled back: no wake
        with job_wakeups.begin(eng) as c:
            job_wakeups.announce(c)
            assert w.wait(0) is False                  # not before the commit
        assert w.wait(0) is True
    eng.dispose()


def test_a_lost_listen_connection_comes_back(pg_db, caplog):
    with JobWakeups(pg_db, reconnect_initial=0.2) as w:
        pid, = listener_pids(pg_db)
        eng = make_engine(pg_db)
        with eng.connect() as c:
            c.execute(sa.select(sa.func.pg_terminate_backend(pid)))
        eng.dispose()
        # the wait notices the loss, falls back to its timeout, connects again within it and
        # returns True (a notification may have been missed meanwhile)
        t0 = time.monotonic()
        assert w.wait(10) is True and time.monotonic() - t0 < 2
        new_pid, = listener_pids(pg_db)
        assert w.listening and new_pid != pid
        notify(pg_db, "x")
        assert w.wait(10) is True
        messages = [r.getMessage() for r in caplog.records if r.name == "blocktune.wakeups"]
        assert any("cannot listen" in m for m in messages) and any("again" in m for m in messages)


def test_no_database_to_listen_on_falls_back_to_the_timeout(postgres_server, caplog):
    with JobWakeups(f"{postgres_server}/no_such_database", reconnect_initial=60) as w:
        assert not w.listening
        t0 = time.monotonic()
        assert w.wait(0.3) is False and 0.25 < time.monotonic() - t0 < 2
        w.wake()
        assert w.wait(10) is True
    assert sum("cannot listen" in r.getMessage() for r in caplog.records) == 1
