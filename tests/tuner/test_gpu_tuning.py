"""Tuning on a real GPU (the H100): `python3 -m pytest -m gpu tests/tuner`. Skipped without a GPU."""
from __future__ import annotations

import collections
import time

import pytest
import sqlalchemy as sa

from db import migrate
from db.engine import make_engine, session_factory
from db.models import BestConfig, Gpu, Job
from jobspec.model import JobSpec
from kernels import example, modes_spec
from tuner.engine import run_job
from tuner.submission import create_job_from_spec

pytestmark = pytest.mark.gpu


def _run(url, spec_dict):
    migrate.upgrade(url)
    job_id = create_job_from_spec(url, JobSpec.model_validate(spec_dict))
    events = []
    run_job(url, job_id, device=0, on_event=lambda k, d: events.append((k, d)))
    engine = make_engine(url)
    return job_id, engine, session_factory(engine), events


def test_real_tuning_run_on_the_gpu(sqlite_url):
    from compiler.runtime import driver

    props = driver.device_properties(0)
    spec = example("vector_add", N=1 << 24)
    spec["budget"] = {"trials": 12}
    spec["sampler"] = "tpe"
    job_id, engine, Session, events = _run(sqlite_url, spec)
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        statuses = collections.Counter(t.status for t in job.trials)
        assert statuses["ok"] == 12, statuses
        for t in job.trials:
            if t.status == "ok":
                assert len(t.samples_ms) >= 10 and 0.001 < t.median_ms < 100
                assert t.spread["p20"] <= t.median_ms <= t.spread["p80"]
        best = s.scalars(sa.select(BestConfig)).one()
        assert best.gpu_model == props["name"] and best.compute_capability == "%d.%d" % props["capability"]
        assert best.default_ms is not None and best.median_ms <= best.default_ms * 1.05
        gpu = s.scalars(sa.select(Gpu)).one()
        assert gpu.model == props["name"] and gpu.sm_count == props["sm_count"]
        # 16M floats × 3 × 4 bytes at ≥ 1 TB/s: the best config is well under a millisecond
        assert best.median_ms < 1.0
    engine.dispose()


def test_short_kernels_use_cuda_graphs(sqlite_url):
    spec = example("vector_add", N=4096)
    spec["space"] = {"BLOCK_SIZE": [256, 1024], "num_warps": [4]}
    spec["budget"] = {"trials": 2}
    job_id, engine, Session, events = _run(sqlite_url, spec)
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        assert all(t.status == "ok" and t.median_ms < 0.05 for t in job.trials)
    engine.dispose()


def test_faulting_and_hanging_configs_leave_the_run_alive(sqlite_url):
    """MODE 1 reads ~4 GB past its buffer (illegal address: the CUDA context dies, the child is
    restarted), MODE 3 spins forever (killed at the timeout); the other configs still run."""
    spec = modes_spec(n=1 << 20, timeout_s=15.0)
    t0 = time.monotonic()
    job_id, engine, Session, events = _run(sqlite_url, spec)
    assert time.monotonic() - t0 < 300
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        by_mode = {t.config["MODE"]: t for t in job.trials}
        assert {m: t.status for m, t in by_mode.items()} == {
            0: "ok", 1: "runtime-error", 2: "wrong-result", 3: "timeout", 4: "compile-error", 5: "invalid"}
        assert job.best_config["MODE"] == 0
    engine.dispose()


@pytest.mark.parametrize("plane", ["driver", "torch"])
def test_both_data_planes(sqlite_url, monkeypatch, plane):
    """The GPU child runs without torch by default (driver API buffers, events, graphs; numpy
    inputs and checks) and with torch under BLOCKTUNE_CHILD_TORCH=1: both tune the same job to
    correct results (every config checked against the first one's outputs) and real timings."""
    if plane == "torch":
        monkeypatch.setenv("BLOCKTUNE_CHILD_TORCH", "1")
    else:
        monkeypatch.delenv("BLOCKTUNE_CHILD_TORCH", raising=False)
    spec = example("softmax", M=512, N=1000)
    spec["space"] = {"BLOCK_SIZE": [1024, 2048], "num_warps": [4, 8]}
    spec["budget"] = {"trials": 4}
    job_id, engine, Session, events = _run(sqlite_url, spec)
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        assert [t.status for t in job.trials] == ["ok"] * 4, [t.error for t in job.trials]
        assert all(len(t.samples_ms) >= 10 and 0.0005 < t.median_ms < 10 for t in job.trials)
    done = [d for k, d in events if k == "done"][0]
    detail = done.get("timeline", {}).get("child_start_detail", {})
    assert ("import_torch" in detail) == (plane == "torch"), detail
    engine.dispose()
