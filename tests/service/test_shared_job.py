"""Two real workers on one job (service.worker.Worker in threads, interpret mode, the real tuner and
its child processes): the trial budget is spent exactly, jobs.trials_done equals the recorded
trials, nothing is measured twice; and a worker that lost its job's lease stops cleanly."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import optuna
import sqlalchemy as sa

from db.engine import make_engine
from db.models import Worker as WorkerRow
from service.worker import Worker
from worker_helpers import (INTERP, bigger_spec, counted, start_pausable_worker, study_trials, submit, trials_of,
                            wait_exit, wait_paused)

ROUNDS = 4
BUDGET = 9


class Rendezvous:
    """Per job: each worker's tuner, at its first recorded trial, waits until the other worker's
    tuner has started on the job too, so that every round really is shared."""

    def __init__(self, names):
        self.names = names
        self.started: dict[tuple[int, str], threading.Event] = {}
        self.lock = threading.Lock()

    def event(self, job_id, name) -> threading.Event:
        with self.lock:
            return self.started.setdefault((job_id, name), threading.Event())

    def run_job_for(self, name):
        from tuner.engine import run_job

        other = next(n for n in self.names if n != name)

        def wrapped(db_url, job_id, **kw):
            first = True

            def on_event(kind, data):
                nonlocal first
                if kind == "start":
                    self.event(job_id, name).set()
                elif kind == "trial" and first:
                    first = False
                    self.event(job_id, other).wait(60)

            run_job(db_url, job_id, on_event=on_event, **kw)

        return wrapped


def test_two_workers_spend_the_budget_exactly(db_url):
    """Many rounds, each a job shared by two workers: exactly BUDGET trials counted, trials_done
    exact, no config measured twice, no trial left RUNNING in the study."""
    names = ("left", "right")
    rv = Rendezvous(names)
    workers = [Worker(db_url, interpret=True, name=n, lease_seconds=30, heartbeat_seconds=1, poll_seconds=0.1,
                      run_job=rv.run_job_for(n)) for n in names]
    for w in workers:
        w.start_thread()
    try:
        for _ in range(ROUNDS):
            job_id = submit(db_url, bigger_spec(BUDGET))
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                state = trials_of(db_url, job_id)[0]["state"]
                if state not in ("queued", "running") and all(w.current_job is None for w in workers):
                    break
                assert all(w._thread.is_alive() for w in workers)
                time.sleep(0.2)
            job, rows = trials_of(db_url, job_id)
            assert job["state"] == "succeeded", job["error"]
            mine = counted(rows)
            assert {r.worker for r in mine} == set(names), [r.worker for r in mine]      # shared for real
            assert len(mine) == BUDGET, [(r.number, r.worker) for r in rows]              # not one over
            assert job["trials_done"] == BUDGET
            assert len({r.number for r in rows}) == len(rows)
            assert len({json.dumps(r.config, sort_keys=True) for r in mine}) == BUDGET     # none measured twice
            assert job["gpu_model"] == INTERP and job["best_config"] in [r.config for r in mine]
            states = [t.state for t in study_trials(db_url, job_id)]
            assert optuna.trial.TrialState.RUNNING not in states
    finally:
        for w in workers:
            w.stop()
        for w in workers:
            w.join(60)


def _worker_state(url: str, name: str) -> str | None:
    eng = make_engine(url)
    with eng.connect() as c:
        state = c.execute(sa.select(WorkerRow.state).where(WorkerRow.name == name)).scalar_one_or_none()
    eng.dispose()
    return state


def test_a_worker_that_lost_its_lease_stops_cleanly(sqlite_db, tmp_path):
    """A worker frozen (SIGSTOP) mid-job for longer than its lease: another worker re-claims the
    job and fails the frozen one's trials. Thawed, the first worker drops the results of trials it
    no longer owns, sees that it lost the job, stops working on it and stays alive; the job ends
    with exactly its budget and nothing counted twice."""
    url = sqlite_db
    job_id = submit(url, bigger_spec(10))
    a, a_paused, a_resume = start_pausable_worker(url, "frozen", 2, tmp_path, "--lease", "3", "--heartbeat", "0.5",
                                                  "--no-join")
    b = None
    try:
        wait_paused(a, a_paused)
        os.killpg(a.pid, signal.SIGSTOP)                   # the worker, its tuning child and pool: frozen
        # "taker" claims the job once the lease has run out, and pauses with 3 trials of its own
        b, b_paused, b_resume = start_pausable_worker(url, "taker", 5, tmp_path, "--lease", "30",
                                                      "--heartbeat", "0.5", "--no-join")
        wait_paused(b, b_paused)
        assert trials_of(url, job_id)[0]["claimed_by"] == "taker"
        a_resume.write_text("go")
        os.killpg(a.pid, signal.SIGCONT)
        deadline = time.monotonic() + 60                   # "frozen" leaves the job: idle again
        while _worker_state(url, "frozen") != "idle":
            assert a.poll() is None and time.monotonic() < deadline, "the frozen worker did not leave the job"
            time.sleep(0.1)
        b_resume.write_text("go")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and trials_of(url, job_id)[0]["state"] == "running":
            assert a.poll() is None and b.poll() is None
            time.sleep(0.3)
        assert a.poll() is None                              # alive: it lost a job, not its life
        a.send_signal(signal.SIGTERM)
        b.send_signal(signal.SIGTERM)
        out_a, out_b = wait_exit(a, 60), wait_exit(b, 60)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert a.returncode == 0 and "frozen stopped" in out_a, out_a[-3000:]
    assert "frozen lost job" in out_a, out_a[-3000:]
    job, rows = trials_of(url, job_id)
    assert job["state"] == "succeeded" and job["claimed_by"] == "taker", (job["error"], out_b[-2000:])
    mine = counted(rows)
    assert len(mine) == job["trials_done"] == 10, [(r.number, r.worker, r.status) for r in rows]
    assert len({json.dumps(r.config, sort_keys=True) for r in mine}) == 10
    assert len({r.number for r in rows}) == len(rows)
    by_number = {t.number: t for t in study_trials(url, job_id)}
    assert not [t for t in by_number.values() if t.state == optuna.trial.TrialState.RUNNING]
    for r in rows:       # the study and tuning_trials agree: every recorded trial is COMPLETE
        assert by_number[r.number].state == optuna.trial.TrialState.COMPLETE
