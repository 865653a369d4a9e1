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
import pytest
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


def test_a_worker_that_lost_its_lease_stops_cleanly(db_url, tmp_path):
    """A worker frozen (SIGSTOP) mid-job for longer than its lease: another worker re-claims the
    job and fails the frozen one's trials. Thawed, the first worker drops the results of trials it
    no longer owns, sees that it lost the job, stops working on it and stays alive; the job ends
    with exactly its budget and nothing counted twice."""
    url = db_url
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


class FinalStepScript:
    """Hooks (the tuners' events) that make two workers meet at the end of one job the way a fleet's
    workers do: "left" runs the job alone until two trials are left, both in flight on it; then
    "right" joins, finds no trial to run (a helper) and re-measures the finalists as they stand
    while "left" records its last trials; then both re-measure the final finalists."""

    def __init__(self, budget: int):
        self.budget = budget
        self.gate = threading.Event()                     # right may join
        self.helping = threading.Event()                  # right found no trial left for it
        self.search_over = {n: threading.Event() for n in ("left", "right")}
        self.first_round = {n: threading.Event() for n in ("left", "right")}
        self.first_final_round = {n: threading.Event() for n in ("left", "right")}
        self.ended = {n: threading.Event() for n in ("left", "right")}
        self.stop_reasons: dict[str, str] = {}
        self.rounds: list[tuple[str, float, bool]] = []   # (worker, when finished, final)
        self.last_trial_at: float | None = None           # when left recorded its last trial
        self.done_events: dict[str, dict] = {}

    def run_job_for(self, name: str):
        from tuner.engine import run_job

        other = "right" if name == "left" else "left"

        def on_event(kind, data):
            if kind == "trial" and name == "left":
                if data["done"] >= self.budget - 2 and not self.gate.is_set():
                    self.gate.set()
                    assert self.helping.wait(120), "right did not join as a helper"
                elif self.helping.is_set():
                    # left's last trials are recorded only once right has re-measured a round
                    assert self.first_round["right"].wait(60)
                    self.last_trial_at = time.time()
            elif kind == "stop":
                self.stop_reasons[name] = data["reason"]
                if name == "right" and "in flight on other workers" in data["reason"]:
                    self.helping.set()
                self.search_over[name].set()
            elif kind == "round":
                self.rounds.append((name, time.time(), data["final"]))
                self.first_round[name].set()
                if not data["final"]:           # one round as a helper, then wait for the last trial
                    assert self.search_over[other].wait(60)
                else:                           # each measures a final round before either goes on
                    self.first_final_round[name].set()
                    self.first_final_round[other].wait(60) or self.ended[other].wait(0)
            elif kind == "done":
                self.done_events[name] = data

        def wrapped(db_url, job_id, **kw):
            if name == "right":
                assert self.gate.wait(240), "left never got near the end of the budget"
            try:
                run_job(db_url, job_id, on_event=on_event, **kw)
            finally:
                self.ended[name].set()

        return wrapped


def test_two_workers_share_the_final_re_measurement(db_url):
    """A worker that runs out of trials while another runs the last ones re-measures the finalists
    meanwhile, and the winner is picked from rounds both workers measured, every round holding every
    final finalist on the job's GPU model; the budget stays exact."""
    _share_the_final_step(db_url, interpret=True)


@pytest.mark.gpu
def test_two_gpu_workers_share_the_final_re_measurement(sqlite_db):
    """The same on the GPU (two workers on device 0): each re-measures finalists the other compiled
    and measured (their cubins compiled in its own pool, loaded in its own GPU child)."""
    _share_the_final_step(sqlite_db, interpret=False)


def _share_the_final_step(db_url: str, *, interpret: bool) -> None:
    from tuner.final_rounds import read_rounds

    budget = 8
    spec = bigger_spec(budget)
    spec["lookahead"] = 3
    spec["measure"] = {**spec["measure"], "remeasure_top": 2, "remeasure_rounds": 4}
    script = FinalStepScript(budget)
    workers = {n: Worker(db_url, interpret=interpret, name=n, lease_seconds=30, heartbeat_seconds=1,
                         poll_seconds=0.1, run_job=script.run_job_for(n)) for n in ("left", "right")}
    job_id = submit(db_url, spec)
    workers["left"].start_thread()
    try:
        deadline = time.monotonic() + 120
        while trials_of(db_url, job_id)[0]["claimed_by"] != "left":
            assert time.monotonic() < deadline and workers["left"]._thread.is_alive()
            time.sleep(0.1)
        workers["right"].start_thread()
        deadline = time.monotonic() + 300
        while not all(script.ended[n].is_set() for n in ("left", "right")):
            assert time.monotonic() < deadline, (script.stop_reasons, script.rounds)
            time.sleep(0.2)
    finally:
        for w in workers.values():
            w.stop()
        for w in workers.values():
            w.join(60)
    job, rows = trials_of(db_url, job_id)
    assert job["state"] == "succeeded", job["error"]
    mine = counted(rows)
    assert len(mine) == job["trials_done"] == budget
    assert {r.worker for r in mine} == {"left"}          # right joined when no trial was left for it
    assert "in flight on other workers" in script.stop_reasons["right"], script.stop_reasons
    assert script.stop_reasons["left"] == "trial budget spent"
    # right re-measured while left still ran trials
    helper_rounds = [t for n, t, final in script.rounds if n == "right" and not final]
    assert len(helper_rounds) == 1 and script.last_trial_at is not None and helper_rounds[0] < script.last_trial_at

    study = optuna.load_study(study_name=f"job-{job_id}", storage=db_url)
    finalists = list(study.user_attrs["remeasured_ms"])
    assert len(finalists) >= 2 and all(v is not None for v in study.user_attrs["remeasured_ms"].values())
    assert json.dumps(job["best_config"], sort_keys=True, separators=(",", ":")) in finalists
    used = [r for r in read_rounds(study) if r.finished and r.holds(finalists)]
    assert {r.worker for r in used} == {"left", "right"}, [(r.worker, r.finalists) for r in read_rounds(study)]
    gpu_model = job["gpu_model"]
    assert (gpu_model == INTERP) == interpret
    assert len(used) >= 4 and all(r.gpu_model == gpu_model for r in used)
    # two workers take part: once each knows of the other it measures half rounds (left may have
    # measured a whole one before right's first round), and the winner's rounds add up to the four
    # whole rounds the spec asks for (tuner/final_rounds.py)
    parts = [(r.worker, r.part) for r in used]
    assert all(p == 0.5 for w, p in parts if w == "right") and ("left", 0.5) in parts, parts
    assert sum(p for _, p in parts) >= 4, parts
    assert all(len(s) > 0 for r in used for s in r.samples) and not any(e for r in used for e in r.errors)
    # the worker that stored the winner (only it says "done") tells how its rounds were split; a
    # round the other finished just after may be in the study too
    (publisher, done), = script.done_events.items()
    tl = done["timeline"]
    assert 4 <= tl["final_rounds_here"] + tl["final_rounds_elsewhere"] <= len(used)
    assert tl["final_rounds_here"] >= 1 and tl["final_rounds_elsewhere"] >= 1, tl
