"""Repository functions against both databases."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from db import migrate, repo
from db.engine import make_engine, session_factory
from db.models import BestConfig, Gpu, Job, Trial, Worker
from jobspec.problem_key import canonical_key


@pytest.fixture
def Session(database_url):
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    yield session_factory(engine)
    engine.dispose()


H100 = dict(name="NVIDIA H100 80GB HBM3", capability=(9, 0), sm_count=132, total_memory=85_520_809_984,
            driver_version="575.57", cuda_version="12.9")


def test_gpu_and_kernel_get_or_create(Session):
    with Session.begin() as s:
        g1 = repo.get_or_create_gpu(s, H100)
        k1 = repo.get_or_create_kernel(s, fingerprint="abc", name="add", source="def add(): pass",
                                       compiler_version="0.1")
    with Session.begin() as s:
        g2 = repo.get_or_create_gpu(s, {**H100, "driver_version": "580.1"})
        k2 = repo.get_or_create_kernel(s, fingerprint="abc", name="add", source="x", compiler_version="0.1")
        assert (g2.id, k2.id) == (g1.id, k1.id)
        assert g2.driver_version == "580.1" and g2.compute_capability == "9.0"
        assert g2.total_memory == 85_520_809_984  # bigint
        assert s.scalar(sa.select(sa.func.count()).select_from(Gpu)) == 1


def test_job_trials_and_best_config(Session):
    with Session.begin() as s:
        k = repo.get_or_create_kernel(s, fingerprint="fp", name="softmax", source="src", compiler_version="0.1")
        job = repo.create_job(s, k, {"kernel": {"name": "softmax"}}, trials_total=10)
        assert job.study_name == f"job-{job.id}"
        repo.record_trial(s, job_id=job.id, number=0, config={"BLOCK": 64}, status="ok",
                          samples_ms=[1.0, 1.1, 0.9], median_ms=1.0, spread={"min": 0.9, "max": 1.1})
        repo.record_trial(s, job_id=job.id, number=1, config={"BLOCK": 9999}, status="compile-error",
                          error="too big", median_ms=float("inf"))
        repo.record_trial(s, job_id=job.id, number=1, config={"BLOCK": 9999}, status="invalid", error="again")
        with pytest.raises(ValueError):
            repo.record_trial(s, job_id=job.id, number=2, config={}, status="splendid")
        job_id = job.id
    with Session() as s:
        trials = s.scalars(sa.select(Trial).order_by(Trial.number)).all()
        assert [(t.number, t.status) for t in trials] == [(0, "ok"), (1, "invalid")]
        assert trials[0].samples_ms == [1.0, 1.1, 0.9] and trials[1].median_ms is None
    key = canonical_key({"n": 4096, "m": 128})
    assert key == '{"m":128,"n":4096}'
    for cfg, ms in (({"BLOCK": 64, "num_warps": 4}, 1.0), ({"BLOCK": 128, "num_warps": 8}, 0.8)):
        with Session.begin() as s:
            repo.upsert_best_config(s, kernel_fingerprint="fp", kernel_name="softmax", problem_key=key,
                                    gpu_model=H100["name"], compute_capability="9.0", config=cfg,
                                    median_ms=ms, default_ms=1.2, job_id=job_id)
    with Session() as s:
        rows = s.scalars(sa.select(BestConfig)).all()
        assert len(rows) == 1 and rows[0].config == {"BLOCK": 128, "num_warps": 8} and rows[0].median_ms == 0.8
        best = repo.get_best_config(s, kernel_fingerprint="fp", problem_key=key, gpu_model=H100["name"])
        assert best is not None and best.default_ms == 1.2 and best.job_id == job_id
        assert repo.find_best_configs(s, kernel_name="softmax")[0].id == best.id
        assert repo.find_best_configs(s, kernel_name="other") == []


def test_finish_job_does_not_override_cancel(Session):
    with Session.begin() as s:
        k = repo.get_or_create_kernel(s, fingerprint="fp", name="k", source="s", compiler_version="0")
        job = repo.create_job(s, k, {})
        job.state = "cancelled"
        job_id = job.id
    with Session.begin() as s:
        assert repo.finish_job(s, job_id, "succeeded") is False
        assert repo.job_state(s, job_id) == "cancelled"


def test_upsert_faster_policy_keeps_the_fastest_under_concurrency(Session):
    """Writers of one entry released together by a barrier, 30 rounds: the fastest always stays,
    and each writer gets back the row as stored (never slower than what it sent)."""
    import random
    import threading

    key = canonical_key({"n": 1})
    rnd = random.Random(7)
    writers = 6
    for rnd_no in range(30):
        fp = f"race{rnd_no}"
        medians = [round(rnd.uniform(0.1, 2.0), 6) for _ in range(writers)]
        barrier = threading.Barrier(writers)
        got, errors = [None] * writers, []

        def write(i):
            try:
                barrier.wait(10)
                with Session.begin() as s:
                    row = repo.upsert_best_config(s, kernel_fingerprint=fp, kernel_name="k", problem_key=key,
                                                  gpu_model="G", compute_capability="9.0",
                                                  config={"BLOCK": i}, median_ms=medians[i], policy="faster")
                    got[i] = row.median_ms
            except Exception as exc:   # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert all(g <= m for g, m in zip(got, medians)), (got, medians)
        with Session() as s:
            best = repo.get_best_config(s, kernel_fingerprint=fp, problem_key=key, gpu_model="G")
            assert best.median_ms == min(medians) and best.config == {"BLOCK": medians.index(min(medians))}


def test_upsert_policies(Session):
    key = canonical_key({"n": 2})
    common = dict(kernel_fingerprint="p", kernel_name="k", problem_key=key, gpu_model="G", compute_capability="9.0")
    with Session.begin() as s:
        repo.upsert_best_config(s, **common, config={"B": 1}, median_ms=1.0, default_ms=2.0, policy="faster")
    with Session.begin() as s:     # slower: kept out, and the stored row is the answer
        row = repo.upsert_best_config(s, **common, config={"B": 2}, median_ms=1.5, policy="faster")
        assert (row.config, row.median_ms, row.default_ms) == ({"B": 1}, 1.0, 2.0)
    with Session.begin() as s:     # faster without a default: the stored default stays
        row = repo.upsert_best_config(s, **common, config={"B": 3}, median_ms=0.5, policy="faster")
        assert (row.config, row.median_ms, row.default_ms) == ({"B": 3}, 0.5, 2.0)
    with Session.begin() as s:     # a tuning job's winner replaces it even when slower
        row = repo.upsert_best_config(s, **common, config={"B": 4}, median_ms=0.9)
        assert (row.config, row.median_ms, row.default_ms) == ({"B": 4}, 0.9, None)
    with pytest.raises(ValueError, match="policy"):
        with Session.begin() as s:
            repo.upsert_best_config(s, **common, config={}, median_ms=1.0, policy="slower")


def test_a_job_from_submission_to_success(Session):
    """Every write of a job's life goes through db.repo: submitted (its kernel registered once),
    started by a run, its progress, its end."""
    kernel = dict(fingerprint="fp2", kernel_name="add", source="src", compiler_version="0.1")
    with Session.begin() as s:
        first = repo.submit_job(s, **kernel, spec={"a": 1}, trials_total=4, idempotency_key="k1")
        second = repo.submit_job(s, **kernel, spec={"a": 2}, gpu_model="NVIDIA L4")
        assert first.kernel_id == second.kernel_id and first.state == second.state == "queued"
        assert second.study_name == f"job-{second.id}" and second.gpu_model == "NVIDIA L4"
        job_id = first.id
    with pytest.raises(sa.exc.IntegrityError):        # an idempotency key names one job
        with Session.begin() as s:
            repo.submit_job(s, **kernel, spec={"a": 3}, idempotency_key="k1")
    with Session.begin() as s:
        job = repo.start_job(s, job_id, worker="w1")
        assert job.state == "running" and job.claimed_by == "w1" and job.started_at is not None
        started = job.started_at
    with Session.begin() as s:
        assert repo.start_job(s, job_id, worker="w2").claimed_by == "w1"     # a resume keeps both
        repo.update_progress(s, job_id, trials_total=4, progress=0.5, best_time_ms=1.5, best_config={"B": 64})
    with Session.begin() as s:
        repo.record_trial(s, job_id=job_id, number=0, config={"B": 64}, status="ok", median_ms=1.5)
        repo.record_trial(s, job_id=job_id, number=1, config={"B": 8}, status="invalid",
                          error=repo.UNCOUNTED_ERROR_PREFIX + "B >= 16")
        assert repo.succeed_job(s, job_id, best_config={"B": 64}, best_time_ms=1.4)
    with Session() as s:
        job = s.get(Job, job_id)
        assert (job.state, job.progress, job.trials_done, job.best_time_ms) == ("succeeded", 1.0, 1, 1.4)
        assert job.started_at == started and job.finished_at is not None
    with Session.begin() as s:
        assert repo.start_job(s, job_id) is None                     # finished: nothing to run
        assert not repo.succeed_job(s, job_id, best_config={"B": 8}, best_time_ms=0.1)
        assert not repo.finish_job(s, job_id, "cancelled")
        with pytest.raises(LookupError):
            repo.start_job(s, 10**6)


def test_a_worker_fails_only_the_job_it_runs(Session):
    with Session.begin() as s:
        job = repo.submit_job(s, fingerprint="fp3", kernel_name="k", source="s", compiler_version="0.1", spec={})
        job_id = job.id
    with Session.begin() as s:       # given back to the queue meanwhile: not the worker's to fail
        assert not repo.finish_job(s, job_id, "failed", error="boom", only_if_running=True)
        repo.start_job(s, job_id)
    with Session.begin() as s:
        assert repo.finish_job(s, job_id, "failed", error="boom", only_if_running=True)
    with Session() as s:
        assert (s.get(Job, job_id).state, s.get(Job, job_id).error) == ("failed", "boom")


def test_workers_register_once_per_name(Session):
    """One row per name; a live worker's row is never taken (its heartbeat is answered instead),
    a stopped or silent worker's row is taken over by the next one of that name."""
    with Session.begin() as s:
        gpu = repo.get_or_create_gpu(s, H100)
        w = repo.register_worker(s, name="host-gpu0", gpu=gpu, device_index=0, alive_seconds=30)
        repo.set_worker_state(s, w.worker_id, "busy")
        worker_id = w.worker_id
    with Session.begin() as s:
        live = repo.register_worker(s, name="host-gpu0", gpu=repo.get_or_create_gpu(s, H100), device_index=1,
                                    alive_seconds=30)
        assert live.worker_id is None and live.holder_heartbeat is not None
        assert s.get(Worker, worker_id).state == "busy" and s.get(Worker, worker_id).device_index == 0
        repo.set_worker_state(s, worker_id, "stopped")
    with Session.begin() as s:
        again = repo.register_worker(s, name="host-gpu0", gpu=repo.get_or_create_gpu(s, H100), device_index=1,
                                     alive_seconds=30)
        assert again.worker_id == worker_id
        row = s.get(Worker, worker_id)
        s.refresh(row)
        assert row.state == "idle" and row.device_index == 1
        repo.set_worker_state(s, worker_id, "stopped")
    with Session() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Worker)) == 1
        assert s.get(Worker, worker_id).state == "stopped"


def test_nothing_outside_db_repo_writes_rows():
    """Every INSERT, UPDATE and DELETE of the tuner, the service and the client is a db.repo
    function (the same checks wherever a row comes from). A static check: the statements and
    Session calls that write, anywhere else."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    writes = re.compile(r"\b(sa\.(update|insert|delete)|(session|s)\.(add|add_all|delete|merge))\(")
    found = [f"{path.relative_to(root)}:{n}: {line.strip()}"
             for pkg in ("tuner", "service", "client", "jobspec")
             for path in sorted((root / pkg).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if writes.search(line)]
    assert found == []
