"""Whole tuning runs in interpret mode: the real engine, child process, compile pool, Optuna study
and database; only the kernels run on the CPU interpreter instead of a GPU."""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
import yaml

from db import migrate
from db.engine import make_engine, session_factory
from db.models import BestConfig, Job, Trial
from jobspec.model import JobSpec
from jobspec.problem_key import canonical_key
from kernels import example, modes_spec
from tuner.engine import run_job
from tuner.study import optuna_storage
from tuner.submission import create_job_from_spec

REPO = Path(__file__).resolve().parents[2]
INTERP = "blocktune interpreter (CPU)"


def _session(url):
    engine = make_engine(url)
    return engine, session_factory(engine)


def _new_job(url, spec_dict) -> int:
    migrate.upgrade(url)
    return create_job_from_spec(url, JobSpec.model_validate(spec_dict))


def test_vector_add_tuning_persists_trials_study_and_best(database_url):
    spec = example("vector_add", N=3000)
    spec["space"] = {"BLOCK_SIZE": [128, 256, 512, 1024], "num_warps": [1, 2, 4]}
    spec["budget"] = {"trials": 8}
    spec["sampler"] = "tpe"
    spec["measure"] = {"remeasure_top": 2, "remeasure_rounds": 2}
    job_id = _new_job(database_url, spec)
    events = []
    run_job(database_url, job_id, interpret=True, worker_id="test:cpu0", on_event=lambda k, d: events.append((k, d)))

    engine, Session = _session(database_url)
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        assert job.progress == 1.0 and job.finished_at is not None and job.started_at <= job.finished_at
        trials = s.scalars(sa.select(Trial).where(Trial.job_id == job_id)).all()
        ok = [t for t in trials if t.status == "ok"]
        invalid = [t for t in trials if t.status == "invalid"]
        assert len(ok) == 8 and job.trials_done == 8          # the budget counts evaluated configs
        assert all(t.error.startswith("constraint violated") for t in invalid)   # 128 × 4 warps
        assert len({json.dumps(t.config, sort_keys=True) for t in ok}) == 8     # no config measured twice
        for t in ok:
            assert len(t.samples_ms) >= 3 and t.median_ms > 0 and t.worker == "test:cpu0"
            assert t.spread["min"] <= t.median_ms <= t.spread["max"]
        first = min(trials, key=lambda t: t.number)
        assert first.config == {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 3}  # the default, enqueued first
        best = s.scalars(sa.select(BestConfig)).one()
        assert best.kernel_name == "add_kernel" and best.gpu_model == INTERP and best.job_id == job_id
        assert best.problem_key == canonical_key({"n_elements": 3000})
        assert best.kernel_fingerprint == job.kernel.fingerprint
        assert best.config == job.best_config and best.median_ms == job.best_time_ms
        assert best.default_ms is not None and best.default_ms > 0
        assert best.config in [t.config for t in ok]
    engine.dispose()

    # the Optuna study lives in the same database, with every trial told; a plain URL opens it
    # (what `optuna-dashboard <database-url>` does)
    study = optuna.load_study(study_name=f"job-{job_id}", storage=database_url)
    states = collections.Counter(t.state for t in study.trials)
    assert states[optuna.trial.TrialState.COMPLETE] >= 8
    assert study.user_attrs["sampler_kind"] == "tpe"
    assert all("config" in t.user_attrs for t in study.trials)
    kinds = [k for k, _ in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("trial") >= 8


def test_softmax_brute_force_in_interpret_mode(sqlite_url):
    spec = example("softmax", M=8, N=100)
    spec["space"] = {"BLOCK_SIZE": [64, 128, 256], "num_warps": [1, 2, 4]}
    spec["budget"] = {"trials": 20}
    spec["measure"] = {"remeasure_top": 1, "remeasure_rounds": 1}
    job_id = _new_job(sqlite_url, spec)
    run_job(sqlite_url, job_id, interpret=True)
    engine, Session = _session(sqlite_url)
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        statuses = collections.Counter((t.config["BLOCK_SIZE"], t.status) for t in job.trials)
        # BLOCK_SIZE 64 < n_cols: refused by the constraint; the rest (2 × 3) all measured by brute force
        assert statuses == {(64, "invalid"): statuses[(64, "invalid")], (128, "ok"): 3, (256, "ok"): 3}
        assert job.trials_total == 6 and job.trials_done == 6
        assert job.best_config["BLOCK_SIZE"] in (128, 256)
    engine.dispose()


def test_failure_kinds_are_recorded_and_the_run_goes_on(sqlite_url):
    job_id = _new_job(sqlite_url, modes_spec(timeout_s=6.0))
    t0 = time.monotonic()
    run_job(sqlite_url, job_id, interpret=True)
    assert time.monotonic() - t0 < 90
    engine, Session = _session(sqlite_url)
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        by_mode = {t.config["MODE"]: t for t in job.trials}
        assert {m: t.status for m, t in by_mode.items()} == {
            0: "ok", 1: "runtime-error", 2: "wrong-result", 3: "timeout", 4: "compile-error", 5: "invalid"}
        assert "out-of-bounds" in by_mode[1].error
        assert "out_ptr" in by_mode[2].error and "differ" in by_mode[2].error
        assert "timeout" in by_mode[3].error
        assert "not_a_function" in by_mode[4].error
        assert "MODE != 5" in by_mode[5].error
        assert all(not t.samples_ms for m, t in by_mode.items() if m)
        assert job.best_config["MODE"] == 0
    engine.dispose()
    study = optuna.load_study(study_name=f"job-{job_id}", storage=optuna_storage(sqlite_url))
    infeasible = [t for t in study.trials if t.constraints.get("infeasible", 0) > 0]
    assert len(infeasible) >= 5  # every failure kind is told to Optuna as infeasible


def test_reference_kernel_named_in_the_spec(sqlite_url):
    """With a reference kernel, even the first config is checked (here: the wrong one)."""
    spec = modes_spec(modes=(2, 0), reference={"name": "add_reference", "config": {"BLOCK_SIZE": 128}},
                      default_config={"MODE": 2, "BLOCK_SIZE": 256})
    job_id = _new_job(sqlite_url, spec)
    run_job(sqlite_url, job_id, interpret=True)
    engine, Session = _session(sqlite_url)
    with Session() as s:
        job = s.get(Job, job_id)
        assert {t.config["MODE"]: t.status for t in job.trials} == {2: "wrong-result", 0: "ok"}
        assert job.trials[0].config["MODE"] == 2 and job.state == "succeeded"
    engine.dispose()


def test_cancel_and_should_stop(sqlite_url):
    spec = example("vector_add", N=2000)
    spec["budget"] = {"trials": 6}
    spec["measure"] = {"remeasure_top": 1, "remeasure_rounds": 1}
    spec["sampler"] = "tpe"
    # cancelled through the database while running: stops, no best config written
    job_id = _new_job(sqlite_url, spec)
    engine, Session = _session(sqlite_url)

    def cancel_after_two(kind, d):
        if kind == "trial" and d["done"] >= 2:
            with Session.begin() as s:
                s.get(Job, job_id).state = "cancelled"

    run_job(sqlite_url, job_id, interpret=True, on_event=cancel_after_two)
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "cancelled" and job.trials_done == 2
        assert s.scalar(sa.select(sa.func.count()).select_from(BestConfig)) == 0

    # should_stop: the job stays running (resumable) and a second run finishes it
    job2 = _new_job(sqlite_url, spec)
    n = {"trials": 0}

    def count(kind, d):
        n["trials"] += kind == "trial" and d["status"] == "ok"

    run_job(sqlite_url, job2, interpret=True, on_event=count, should_stop=lambda: n["trials"] >= 3)
    with Session() as s:
        job = s.get(Job, job2)
        assert job.state == "running" and job.trials_done == 3
    run_job(sqlite_url, job2, interpret=True)
    with Session() as s:
        job = s.get(Job, job2)
        assert job.state == "succeeded" and job.trials_done == 6
        configs = [json.dumps(t.config, sort_keys=True) for t in job.trials if t.status == "ok"]
        assert len(configs) == len(set(configs)) == 6
    engine.dispose()


def test_resume_after_kill(sqlite_url, tmp_path):
    """`blocktune tune` killed with SIGKILL mid-run (GPU child and compile pool included); the job
    is resumed and finishes with the trials recorded before the kill kept."""
    spec = example("vector_add", N=4000)
    spec["budget"] = {"trials": 9}
    spec["sampler"] = "tpe"
    spec["space"] = {"BLOCK_SIZE": [128, 256, 512, 1024, 2048], "num_warps": [1, 2, 4]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    migrate.upgrade(sqlite_url)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "tune", str(path), "--interpret", "--quiet",
                             "--db", sqlite_url], cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    engine, Session = _session(sqlite_url)
    deadline = time.monotonic() + 90
    done_before = 0
    while time.monotonic() < deadline:
        with Session() as s:
            done_before = s.scalar(sa.select(sa.func.count()).select_from(Trial).where(Trial.status == "ok")) or 0
        if done_before >= 3 or proc.poll() is not None:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert 3 <= done_before < 9, proc.stderr.read().decode()[-2000:]
    with Session() as s:
        job = s.scalars(sa.select(Job)).one()
        assert job.state == "running"
        before = {t.number: t.config for t in job.trials}
        job_id = job.id

    run_job(sqlite_url, job_id, interpret=True)
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        after = {t.number: t.config for t in job.trials}
        assert all(after[k] == v for k, v in before.items())     # kept, not re-run
        ok = [json.dumps(t.config, sort_keys=True) for t in job.trials if t.status == "ok"]
        assert len(ok) == len(set(ok)) == 9
        assert s.scalar(sa.select(sa.func.count()).select_from(BestConfig)) == 1
    engine.dispose()
    study = optuna.load_study(study_name=f"job-{job_id}", storage=optuna_storage(sqlite_url))
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]


def test_two_workers_share_one_job(sqlite_url):
    """Two workers on one job (the service lets idle workers join): one study, constant liar, the
    trial budget shared, results not measured twice, one best config."""
    import threading

    spec = example("vector_add", N=2500)
    spec["space"] = {"BLOCK_SIZE": [128, 256, 512, 1024, 2048], "num_warps": [1, 2, 4]}
    spec["budget"] = {"trials": 10}
    spec["sampler"] = "tpe"
    spec["lookahead"] = 1
    spec["measure"] = {"remeasure_top": 1, "remeasure_rounds": 1}
    job_id = _new_job(sqlite_url, spec)
    engine, Session = _session(sqlite_url)
    with Session.begin() as s:
        s.get(Job, job_id).claimed_by = "w1"
    errors = []
    started = {"w1": threading.Event(), "w2": threading.Event()}

    def work(name):
        other = "w2" if name == "w1" else "w1"

        def on_event(kind, d):
            if kind == "start":
                started[name].set()
            elif kind == "trial":   # after its first trial, each waits until the other is running too
                started[other].wait(120)

        try:
            run_job(sqlite_url, job_id, interpret=True, worker_id=name, on_event=on_event)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("w1", "w2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        ok = [t for t in job.trials if t.status == "ok"]
        assert {t.worker for t in ok} == {"w1", "w2"}
        assert len(ok) == job.trials_done == 10    # the budget exactly: trials are asked under the job's lock
        # a config is asked by one worker only, and never measured twice
        assert len({json.dumps(t.config, sort_keys=True) for t in ok}) == len(ok)
        assert s.scalar(sa.select(sa.func.count()).select_from(BestConfig)) == 1
    engine.dispose()


INPLACE_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def scale_inplace(x_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(x_ptr + offsets, x * 2.0 + 1.0, mask=mask)
'''


def test_inplace_outputs_are_reset_between_runs(sqlite_url):
    """An in-place kernel is run many times while measured; every config must still see the
    original input when its result is checked (else all but the first would be wrong-result)."""
    spec = {
        "kernel": {"name": "scale_inplace", "source": INPLACE_SOURCE},
        "sizes": {"N": 700},
        "args": [{"name": "x_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "randn", "inplace": True}},
                 {"name": "n_elements", "value": "N"}],
        "grid": ["cdiv(n_elements, BLOCK_SIZE)"],
        "space": {"BLOCK_SIZE": [64, 128, 256], "num_warps": [1, 2]},
        "check": {"outputs": ["x_ptr"]},
        "budget": {"trials": 6},
        "sampler": "tpe",      # TPE over all 6 configs: near the end it can only repeat known ones
        "measure": {"remeasure_top": 1, "remeasure_rounds": 1},
    }
    job_id = _new_job(sqlite_url, spec)
    run_job(sqlite_url, job_id, interpret=True)
    engine, Session = _session(sqlite_url)
    with Session() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        assert [t.status for t in job.trials] == ["ok"] * 6
        assert len({json.dumps(t.config, sort_keys=True) for t in job.trials}) == 6
        assert all(len(t.samples_ms) >= 3 for t in job.trials)
    engine.dispose()


def test_a_new_database_at_the_same_path_starts_clean(tmp_path):
    """Job ids restart in a new database at an old path: job 1 of the new one must not find the
    reference outputs job 1 of the old one left in its work directory."""
    url = f"sqlite:///{tmp_path / 'reused.db'}"
    for n in (5000, 1500):
        spec = example("vector_add", N=n)
        spec["space"] = {"BLOCK_SIZE": [256, 512], "num_warps": [2]}
        spec["budget"] = {"trials": 2}
        spec["measure"] = {"remeasure_top": 1, "remeasure_rounds": 1}
        job_id = _new_job(url, spec)
        assert job_id == 1
        run_job(url, job_id, interpret=True)
        engine, Session = _session(url)
        with Session() as s:
            job = s.get(Job, job_id)
            assert job.state == "succeeded", job.error
            assert {t.status for t in job.trials} == {"ok"}, [t.error for t in job.trials]
        engine.dispose()
        (tmp_path / "reused.db").unlink()
