"""The per-job lock (db.job_lock) and store_trial's trials_done under concurrency, on both databases."""
from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from db import migrate, repo
from db.engine import make_engine, session_factory
from db.job_lock import job_lock
from db.models import Job

THREADS = 4


@pytest.fixture
def job(database_url):
    """(url, job id) of a fresh job in a migrated database."""
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    with session_factory(engine).begin() as s:
        k = repo.get_or_create_kernel(s, fingerprint="fp", name="k", source="src", compiler_version="0.1")
        job_id = repo.create_job(s, k, {}, trials_total=100).id
    engine.dispose()
    return database_url, job_id


def _in_threads(fn, n=THREADS):
    barrier = threading.Barrier(n)
    errors = []

    def run(i):
        try:
            barrier.wait()
            fn(i)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors


def test_job_lock_excludes_other_holders(job):
    """Read-modify-write of a job's progress from several threads (each with its engine, like
    separate workers): with the lock no increment is lost, and no two holders overlap."""
    url, job_id = job
    inside, overlaps = [0], [0]

    def work(i):
        engine = make_engine(url)
        try:
            for _ in range(10):
                with job_lock(engine, job_id):
                    inside[0] += 1
                    overlaps[0] += inside[0] > 1
                    with engine.connect() as c:
                        seen = c.execute(sa.select(Job.trials_done).where(Job.id == job_id)).scalar_one()
                    time.sleep(0.002)      # a window in which an unlocked writer would interleave
                    with engine.begin() as c:
                        c.execute(sa.update(Job).where(Job.id == job_id).values(trials_done=seen + 1))
                    inside[0] -= 1
        finally:
            engine.dispose()

    _in_threads(work)
    engine = make_engine(url)
    with engine.connect() as c:
        assert c.execute(sa.select(Job.trials_done).where(Job.id == job_id)).scalar_one() == THREADS * 10
    engine.dispose()
    assert overlaps[0] == 0


def test_the_lock_is_per_job_on_postgresql(postgres_url):
    migrate.upgrade(postgres_url)
    engine = make_engine(postgres_url)
    other = make_engine(postgres_url)
    try:
        with job_lock(engine, 1):
            got = []
            t = threading.Thread(target=lambda: got.append(_take(other, 2)))
            t.start()
            t.join(10)
            assert got == [True]                     # job 2's lock is free while job 1's is held
            t = threading.Thread(target=lambda: got.append(_take(other, 1)))
            t.start()
            t.join(1.0)
            assert t.is_alive()                      # job 1's waits
        t.join(10)
        assert got == [True, True]
    finally:
        engine.dispose()
        other.dispose()


def _take(engine, job_id) -> bool:
    with job_lock(engine, job_id):
        return True


def test_store_trial_keeps_trials_done_equal_to_the_recorded_trials(job):
    """Several writers recording trials of one job at once (no job lock: store_trial's own row
    lock): trials_done ends equal to the counted trials; constraint violations do not count."""
    url, job_id = job

    def work(i):
        engine = make_engine(url)
        Session = session_factory(engine)
        try:
            for n in range(8):
                number = i * 100 + n
                invalid = n == 7
                with Session.begin() as s:
                    repo.store_trial(s, job_id=job_id, number=number, config={"B": number},
                                     status="invalid" if invalid else "ok",
                                     error=repo.UNCOUNTED_ERROR_PREFIX + "B > N" if invalid else None,
                                     samples_ms=[] if invalid else [1.0], median_ms=None if invalid else 1.0)
        finally:
            engine.dispose()

    _in_threads(work)
    engine = make_engine(url)
    with session_factory(engine)() as s:
        assert repo.count_trials(s, job_id) == THREADS * 7
        assert s.scalar(sa.select(Job.trials_done).where(Job.id == job_id)) == THREADS * 7
    engine.dispose()
