"""Job claiming: one atomic statement, leases, expiry and re-claim, release, GPU model matching."""
from __future__ import annotations

import datetime as dt
import threading
import time

import sqlalchemy as sa

from db.engine import make_engine, session_factory
from db.models import Job, Kernel, utcnow
from db.repo import claim, find_joinable_job, gpu_worker_alive, release_job, renew_lease
from jobspec.device import INTERPRETER_MODEL


def claim_job(engine, worker_name: str, gpu_model: str, lease_seconds: float) -> int | None:
    """The id of the job `claim` hands out, or None."""
    got = claim(engine, worker_name, gpu_model, lease_seconds)
    return got.job_id if got is not None else None


def _jobs(url, n, gpu_model=None):
    eng = make_engine(url)
    with session_factory(eng)() as s:
        k = Kernel(fingerprint=f"k{time.time_ns()}", name="k", source="", compiler_version="0")
        s.add(k)
        s.flush()
        ids = []
        for i in range(n):
            j = Job(kernel_id=k.id, gpu_model=gpu_model, spec={}, study_name=f"s{i}", trials_total=10,
                    created_at=utcnow() + dt.timedelta(microseconds=i))
            s.add(j)
            s.flush()
            ids.append(j.id)
        s.commit()
    return eng, ids


def _row(eng, job_id):
    with eng.connect() as c:
        return c.execute(sa.select(Job).where(Job.id == job_id)).mappings().one()


def test_concurrent_claims_take_each_job_once(db_url):
    eng, ids = _jobs(db_url, 12)
    got: dict[str, list[int]] = {}
    barrier = threading.Barrier(4)

    def worker(name):
        e = make_engine(db_url)
        barrier.wait()
        mine = []
        while (j := claim_job(e, name, "GPU-A", 60)) is not None:
            mine.append(j)
        got[name] = mine
        e.dispose()

    ts = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    claimed = [j for js in got.values() for j in js]
    assert sorted(claimed) == sorted(ids)           # every job once, none twice
    for name, js in got.items():
        for j in js:
            r = _row(eng, j)
            assert r["state"] == "running" and r["claimed_by"] == name and r["gpu_model"] == "GPU-A"
            assert r["lease_expires_at"] > utcnow() and r["started_at"] is not None
    eng.dispose()


def test_gpu_model_and_order(db_url):
    eng, (a,) = _jobs(db_url, 1, gpu_model="GPU-B")
    _, (b, c) = _jobs(db_url, 2)
    assert claim_job(eng, "w1", "GPU-A", 60) == b      # GPU-B's job is not for GPU-A; oldest first
    assert claim_job(eng, "w1", "GPU-B", 60) == a
    assert claim_job(eng, "w1", "GPU-B", 60) == c      # a job for any GPU
    assert claim_job(eng, "w1", "GPU-B", 60) is None
    eng.dispose()


def test_expired_lease_is_claimed_again_and_renewal_prevents_it(db_url):
    eng, (j,) = _jobs(db_url, 1)
    assert claim_job(eng, "dead", "GPU-A", 1.0) == j
    assert claim_job(eng, "other", "GPU-A", 60) is None         # lease alive
    assert renew_lease(eng, j, 1.0)
    time.sleep(1.2)
    assert claim_job(eng, "other", "GPU-A", 60) == j            # lease expired: the job is back
    assert _row(eng, j)["claimed_by"] == "other"
    assert not release_job(eng, j, "dead")                      # the dead worker no longer holds it
    assert release_job(eng, j, "other")
    r = _row(eng, j)
    assert r["state"] == "queued" and r["claimed_by"] is None and r["lease_expires_at"] is None
    assert claim_job(eng, "third", "GPU-A", 60) == j
    eng.dispose()


def test_joinable_running_job(db_url):
    eng, (j,) = _jobs(db_url, 1, gpu_model="GPU-A")
    assert find_joinable_job(eng, "w2", "GPU-A") is None        # queued: claim, not join
    claim_job(eng, "w1", "GPU-A", 60)
    assert find_joinable_job(eng, "w1", "GPU-A") is None        # not its own
    assert find_joinable_job(eng, "w2", "GPU-B") is None        # another GPU model
    assert find_joinable_job(eng, "w2", "GPU-A") == j
    with eng.begin() as c:
        c.execute(sa.update(Job).where(Job.id == j).values(trials_done=10))
    assert find_joinable_job(eng, "w2", "GPU-A") is None        # budget spent
    eng.dispose()


def test_cancelled_and_finished_jobs_are_not_claimed(db_url):
    eng, (a, b) = _jobs(db_url, 2)
    with eng.begin() as c:
        c.execute(sa.update(Job).where(Job.id == a).values(state="cancelled"))
        c.execute(sa.update(Job).where(Job.id == b).values(state="succeeded",
                                                           lease_expires_at=utcnow() - dt.timedelta(hours=1)))
    assert claim_job(eng, "w", "GPU-A", 60) is None
    assert not renew_lease(eng, a, 60)
    eng.dispose()


def test_a_claim_says_whether_it_took_over_an_expired_lease(db_url):
    """The worker that re-claims a job learns that its lease had expired (and whose), so that the
    dead worker's in-flight trials can be failed at once; a queued or released job is no takeover."""
    eng, (j,) = _jobs(db_url, 1)
    first = claim(eng, "dead", "GPU-A", 0.5)
    assert first.job_id == j and not first.reclaimed and first.previous_holder is None
    time.sleep(0.7)
    again = claim(eng, "heir", "GPU-A", 60)
    assert again.job_id == j and again.reclaimed and again.previous_holder == "dead"
    assert release_job(eng, j, "heir")
    after_release = claim(eng, "third", "GPU-A", 60)
    assert after_release.job_id == j and not after_release.reclaimed
    eng.dispose()


def test_renewal_by_the_holder_fails_once_another_worker_claimed_the_job(db_url):
    eng, (j,) = _jobs(db_url, 1)
    assert claim_job(eng, "slow", "GPU-A", 0.5) == j
    assert renew_lease(eng, j, 0.5, holder="slow")
    time.sleep(0.7)
    assert renew_lease(eng, j, 0.5, holder="slow")              # expired but not taken: renewed
    time.sleep(0.7)
    assert claim_job(eng, "fast", "GPU-A", 60) == j
    assert not renew_lease(eng, j, 60, holder="slow")           # taken: "slow" must stop working on it
    assert renew_lease(eng, j, 60, holder="fast")
    assert renew_lease(eng, j, 60)                              # a joined worker renews any running job
    assert _row(eng, j)["claimed_by"] == "fast"
    eng.dispose()



def _register(eng, name: str, model: str, *, heartbeat_age_s: float = 0.0, state: str = "idle") -> None:
    from db.models import Worker
    from db.repo import get_or_create_gpu

    with session_factory(eng)() as s:
        gpu = get_or_create_gpu(s, {"name": model, "capability": (9, 0) if model != INTERPRETER_MODEL else (0, 0)})
        s.flush()
        beat = utcnow() - dt.timedelta(seconds=heartbeat_age_s)
        s.add(Worker(name=name, gpu_id=gpu.id, state=state, started_at=beat, last_heartbeat_at=beat))
        s.commit()


def test_a_cpu_worker_leaves_jobs_without_a_gpu_model_to_live_gpu_workers(db_url):
    """`blocktune serve` on a machine without a GPU runs a CPU worker: in a fleet it must not take
    the jobs that name no GPU model while a GPU worker is alive, only the interpreter's own."""
    eng, (anyone,) = _jobs(db_url, 1)
    _, (cpu_job,) = _jobs(db_url, 1, gpu_model=INTERPRETER_MODEL)
    _register(eng, "gpu-host:gpu0", "GPU-A")
    assert gpu_worker_alive(eng, 60, cpu_model=INTERPRETER_MODEL)
    # as the worker claims: the older, unpinned job is left
    assert claim(eng, "cpu-host:cpu0", INTERPRETER_MODEL, 60, unpinned=False).job_id == cpu_job
    assert claim(eng, "cpu-host:cpu0", INTERPRETER_MODEL, 60, unpinned=False) is None
    assert _row(eng, anyone)["state"] == "queued"
    # the GPU worker stops: the CPU worker may take the job (the Worker asks gpu_worker_alive first)
    with eng.begin() as c:
        c.execute(sa.text("UPDATE workers SET state = 'stopped'"))
    assert not gpu_worker_alive(eng, 60, cpu_model=INTERPRETER_MODEL)
    assert claim(eng, "cpu-host:cpu0", INTERPRETER_MODEL, 60, unpinned=True).job_id == anyone


def test_gpu_worker_alive_counts_neither_cpu_workers_nor_silent_ones(db_url):
    eng, _ = _jobs(db_url, 0)
    _register(eng, "cpu-host:cpu0", INTERPRETER_MODEL)
    _register(eng, "gpu-host:gpu0", "GPU-A", heartbeat_age_s=120)
    assert not gpu_worker_alive(eng, 60, cpu_model=INTERPRETER_MODEL)
    assert gpu_worker_alive(eng, 180, cpu_model=INTERPRETER_MODEL)
