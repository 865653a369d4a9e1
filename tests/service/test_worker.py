"""Workers for real, in interpret mode: a job end to end, lease expiry and resume, two workers."""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time

import pytest
import sqlalchemy as sa

from client import Client
from db.engine import make_engine
from db.models import Worker
from svc_helpers import LiveServer, make_token
from worker_helpers import (INTERP, SPEC, bigger_spec, counted, start_pausable_worker, start_worker, study_trials,
                            submit, trials_of, wait_exit, wait_paused)

def test_worker_runs_a_job_end_to_end(sqlite_db):
    """Submit with the client to a live server, a worker process tunes it, the client follows it and
    finds the best config at the interpreter's 'GPU model'. (PostgreSQL: the two-worker test.)"""
    db_url = sqlite_db
    server = LiveServer(db_url)
    try:
        tok = make_token(db_url)
        c = Client(server.base, tok)
        job = c.submit_job(SPEC, idempotency_key="e2e-1")
        assert job.state == "queued"
        w = start_worker(db_url, "e2e-worker", "--exit-when-idle")
        final = c.wait(job.id, poll=0.3, timeout=180, progress=False)
        out = wait_exit(w, 60)
        assert final.state == "succeeded", (final, out[-2000:])
        assert final.trials_done == 6 and final.progress == pytest.approx(1.0)
        assert final.gpu_model == INTERP and final.best_config and final.best_time_ms > 0
        trials = c.trials(job.id)
        assert len({t.number for t in trials}) == len(trials) >= 6
        assert all(t.worker == "e2e-worker" for t in trials)
        assert sum(t.status == "ok" for t in trials) >= 6
        # the worker writes the database; the server's lookups answer from an index it refreshes
        # in the background (every lookup_refresh_s): the config is there within a few refreshes
        deadline = time.monotonic() + 15
        while (best := c.best_config(final.kernel_fingerprint, {"n_elements": 4096}, INTERP)) is None:
            assert time.monotonic() < deadline, "the tuned config never reached the lookups"
            time.sleep(0.2)
        assert best.match == "exact" and best.config == final.best_config
        workers = {w["name"]: w for w in httpx_get(server.base + "/api/v1/workers")}
        assert workers["e2e-worker"]["state"] == "stopped" and workers["e2e-worker"]["gpu_model"] == INTERP
        metrics = httpx_text(server.base + "/metrics")
        assert 'blocktune_jobs{state="succeeded"} 1.0' in metrics
    finally:
        server.stop()


def httpx_get(url):
    import httpx

    return httpx.get(url).json()


def httpx_text(url):
    import httpx

    return httpx.get(url).text


def test_dead_worker_job_is_reclaimed_after_lease_and_resumes(sqlite_db, tmp_path):
    url = sqlite_db
    job_id = submit(url, bigger_spec(10))
    # the doomed worker's tuner pauses after 3 trials (it cannot finish the job before the kill)
    a, paused, _ = start_pausable_worker(url, "doomed", 3, tmp_path, "--lease", "3", "--heartbeat", "0.5",
                                         "--no-join")
    wait_paused(a, paused)
    os.killpg(a.pid, signal.SIGKILL)                     # the worker (and its tuning child) die at once
    a.wait()
    killed_at = time.time()
    job, before = trials_of(url, job_id)
    assert job["state"] == "running" and job["claimed_by"] == "doomed"
    assert sum(r.worker == "doomed" for r in counted(before)) == 3
    lease_end = job["lease_expires_at"]
    done_before = [(r.number, r.config) for r in before]
    b = start_worker(url, "rescuer", "--lease", "30", "--no-join")   # polls until the lease runs out
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and trials_of(url, job_id)[0]["state"] == "running":
        assert b.poll() is None, b.stdout.read()
        time.sleep(0.3)
    b.send_signal(signal.SIGTERM)                         # idle now: it stops at once
    out = wait_exit(b, 30)
    assert b.returncode == 0 and "rescuer stopped" in out
    job, after = trials_of(url, job_id)
    assert job["state"] == "succeeded", (job["error"], out[-3000:])
    assert job["claimed_by"] == "rescuer"
    # the finished trials of the dead worker are all kept, numbers never reused
    assert [(r.number, r.config) for r in after if r.worker == "doomed"] == done_before
    assert len({r.number for r in after}) == len(after)
    rescued = [r for r in after if r.worker == "rescuer"]
    assert rescued and min(r.created_at for r in rescued) >= lease_end   # claimed only once the lease ran out
    assert job["trials_done"] == 10 == len(counted(after))
    # the Optuna study was resumed, not restarted: it holds both workers' trials
    import optuna

    study = optuna.load_study(study_name=f"job-{job_id}", storage=url)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) >= 10
    assert time.time() - killed_at < 180


def test_reclaim_fails_the_dead_workers_running_trials_at_once(sqlite_db, tmp_path):
    """A worker killed with trials in flight: the worker that re-claims the job after the lease
    fails those trials in the study right away (not minutes later), re-runs their configs, and the
    study, tuning_trials and the job's counts agree at the end."""
    import optuna

    url = sqlite_db
    job_id = submit(url, bigger_spec(10))
    a, paused, _ = start_pausable_worker(url, "doomed", 2, tmp_path, "--lease", "3", "--heartbeat", "0.5",
                                         "--no-join")
    wait_paused(a, paused)
    os.killpg(a.pid, signal.SIGKILL)
    a.wait()
    job, before = trials_of(url, job_id)
    recorded_before = {r.number for r in before}
    in_flight = {t.number: t.user_attrs.get("config") for t in study_trials(url, job_id)
                 if t.state == optuna.trial.TrialState.RUNNING and t.number not in recorded_before}
    assert in_flight and all(t.user_attrs.get("worker") == "doomed" for t in study_trials(url, job_id)
                             if t.number in in_flight)     # it died with asked trials (the tuner asks ahead)
    b = start_worker(url, "rescuer", "--lease", "30", "--no-join")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and trials_of(url, job_id)[0]["state"] == "running":
        assert b.poll() is None, b.stdout.read()
        time.sleep(0.3)
    b.send_signal(signal.SIGTERM)
    out = wait_exit(b, 30)
    job, after = trials_of(url, job_id)
    assert job["state"] == "succeeded", (job["error"], out[-3000:])
    by_number = {t.number: t for t in study_trials(url, job_id)}
    # failed as the job was re-claimed: before the rescuer recorded its first trial
    first_rescued = min(r.created_at for r in after if r.worker == "rescuer")
    for n in in_flight:
        t = by_number[n]
        assert t.state == optuna.trial.TrialState.FAIL, (n, t.state)
        assert t.datetime_complete.astimezone(dt.timezone.utc) <= first_rescued
    assert not [t for t in by_number.values() if t.state == optuna.trial.TrialState.RUNNING]
    assert "re-claims job" in out, out[-3000:]
    # their configs went back to the queue and were measured by the rescuer
    rescued_configs = [r.config for r in after if r.worker == "rescuer"]
    for cfg in in_flight.values():
        if cfg is not None:
            assert cfg in rescued_configs
    # tuning_trials, the study and the job agree
    assert job["trials_done"] == len(counted(after)) == 10
    assert len({r.number for r in after}) == len(after)
    assert len({json.dumps(r.config, sort_keys=True) for r in counted(after)}) == 10   # nothing measured twice
    for r in after:
        assert by_number[r.number].state == optuna.trial.TrialState.COMPLETE


def test_two_workers_share_one_job(postgres_url):
    from db.migrate import upgrade

    url = postgres_url
    upgrade(url)
    a = start_worker(url, "alpha", "--heartbeat", "1")
    b = start_worker(url, "beta", "--heartbeat", "1")
    eng = make_engine(url)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:                   # both idle and polling before the job exists
        with eng.connect() as c:
            if set(c.execute(sa.select(Worker.name)).scalars()) == {"alpha", "beta"}:
                break
        assert a.poll() is None and b.poll() is None
        time.sleep(0.2)
    job_id = submit(url, bigger_spec(14))
    while time.monotonic() < deadline + 240 and trials_of(url, job_id)[0]["state"] in ("queued", "running"):
        assert a.poll() is None and b.poll() is None
        time.sleep(0.3)
    a.send_signal(signal.SIGTERM)
    b.send_signal(signal.SIGTERM)
    out_a, out_b = wait_exit(a, 60), wait_exit(b, 60)
    eng.dispose()
    job, rows = trials_of(url, job_id)
    assert job["state"] == "succeeded", (job["error"], out_a[-2000:], out_b[-2000:])
    by = {w: sum(r.worker == w for r in rows) for w in ("alpha", "beta")}
    assert by["alpha"] > 0 and by["beta"] > 0, (by, out_a[-1500:], out_b[-1500:])
    assert len({r.number for r in rows}) == len(rows)
    assert job["trials_done"] == len(counted(rows)) == 14      # the budget exactly, counted exactly
    eng = make_engine(url)
    with eng.connect() as c:
        states = dict(c.execute(sa.select(Worker.name, Worker.state)).all())
    eng.dispose()
    assert states == {"alpha": "stopped", "beta": "stopped"}


def test_shutdown_returns_the_job_to_the_queue(sqlite_db):
    url = sqlite_db
    job_id = submit(url, bigger_spec(30))
    w = start_worker(url, "leaver", "--no-join")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(trials_of(url, job_id)[1]) < 2:
        assert w.poll() is None, w.stdout.read()
        time.sleep(0.2)
    w.send_signal(signal.SIGTERM)
    out = wait_exit(w, 60)
    assert "returned job" in out, out[-2000:]
    job, rows = trials_of(url, job_id)
    assert job["state"] == "queued" and job["claimed_by"] is None and job["lease_expires_at"] is None
    assert 2 <= len(rows) < 30 and job["trials_done"] == len([r for r in rows if r.status != "invalid"])
