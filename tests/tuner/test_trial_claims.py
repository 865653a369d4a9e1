"""tuner/trial_claims.py: the trial budget of a shared job, admitted trial by trial without a
job-wide lock, and a result stored only while its trial is RUNNING (Recorder.store) — on SQLite and
on PostgreSQL, with workers as threads of their own engines and Optuna storages (as processes are)."""
from __future__ import annotations

import threading
import time

import optuna
import pytest

from db import migrate, repo
from db.engine import make_engine, session_factory
from jobspec.model import JobSpec
from kernels import example
from tuner import study_reads, trial_claims
from tuner.recording import Recorder
from tuner.results import Result
from tuner.run_context import RunContext
from tuner.study import optuna_storage
from tuner.submission import create_job_from_spec

TS = optuna.trial.TrialState


@pytest.fixture
def job(database_url):
    """(url, job id) of a job whose Optuna study exists, in a migrated database."""
    migrate.upgrade(database_url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    job_id = create_job_from_spec(database_url, JobSpec.model_validate(example("vector_add", N=3000)))
    optuna.create_study(study_name=f"job-{job_id}", storage=optuna_storage(database_url))
    return database_url, job_id


class Worker:
    """What one worker uses: its engine and its Optuna storage."""

    def __init__(self, url: str, job_id: int, name: str, **storage_kw):
        self.job_id, self.name = job_id, name
        self.engine = make_engine(url)
        self.Session = session_factory(self.engine)
        self.storage = optuna_storage(url, **storage_kw)
        self.study = optuna.load_study(study_name=f"job-{job_id}", storage=self.storage)

    def ask(self) -> optuna.trial.Trial:
        return self.study.ask()

    def claim(self, trial: optuna.trial.Trial, budget: int) -> bool:
        with self.Session.begin() as s:
            return trial_claims.claim(s, job_id=self.job_id, study_trial_id=trial._trial_id, number=trial.number,
                                      worker=self.name, budget=budget)

    def record(self, trial: optuna.trial.Trial, *, counted: bool = True) -> None:
        with self.Session.begin() as s:
            repo.store_trial(s, job_id=self.job_id, number=trial.number, config={"n": trial.number},
                             status="ok" if counted else "invalid", samples_ms=[1.0], median_ms=1.0, spread=None,
                             error=None if counted else repo.UNCOUNTED_ERROR_PREFIX + "x", worker=self.name)

    def close(self) -> None:
        self.engine.dispose()
        self.storage.engine.dispose()


def _race(fn, n: int) -> list:
    """`fn(i)` in n threads released together; their results in order."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def run(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return results


def test_workers_racing_for_the_last_places_get_exactly_the_budget(job):
    """Rounds of four workers claiming at once, each round's budget two places above the last's:
    each round admits exactly two, whatever the order; what a worker claims it records, or fails
    before its result (a stop: the place comes free, and the next round has it as well)."""
    url, job_id = job
    workers = [Worker(url, job_id, f"w{i}") for i in range(4)]
    rounds, barrier = 8, threading.Barrier(4)

    def work(i):
        w, won = workers[i], []
        for k in range(rounds):
            t = w.ask()
            barrier.wait()
            if w.claim(t, 2 * (k + 1)):
                won.append((k, t.number))
            else:
                w.study.tell(t, state=TS.FAIL)           # given back, as the engine does
            barrier.wait()                               # the round's claims are all made
            if won and won[-1][0] == k:
                w.record(t)
                w.study.tell(t, 1.0)
            barrier.wait()
        return won

    try:
        won = [x for xs in _race(work, 4) for x in xs]
        per_round = [sum(1 for k, _ in won if k == r) for r in range(rounds)]
        assert per_round == [2] * rounds, per_round
        assert len({n for _, n in won}) == 2 * rounds
        with workers[0].Session() as s:
            assert repo.count_trials(s, job_id) == 2 * rounds
    finally:
        for w in workers:
            w.close()


def test_a_failed_or_uncounted_trial_frees_its_place_and_a_recorded_one_keeps_it(job):
    url, job_id = job
    w = Worker(url, job_id, "w")
    try:
        a = w.ask()
        assert w.claim(a, 1)
        b = w.ask()
        assert not w.claim(b, 1)                  # a holds the only place
        assert w.claim(a, 1)                      # a retried claim (the answer to its commit lost) stands
        w.study.tell(a, state=TS.FAIL)            # failed before its result (its worker stopped): free again
        assert w.claim(b, 1)
        w.record(b)
        w.study.tell(b, 1.0)
        c = w.ask()
        assert not w.claim(c, 1)                  # b's recorded result holds its place after the tell
        assert w.claim(c, 2)
        w.record(c, counted=False)                # recorded, but not counted (a constraint violated)
        d = w.ask()
        assert w.claim(d, 2)
    finally:
        w.close()


def test_a_dead_workers_claim_is_freed_by_its_heartbeat_going_stale(job):
    """A worker claims a trial and dies (its heartbeat stops): once Optuna fails the stale trial, the
    place is free for another worker."""
    url, job_id = job
    dead = Worker(url, job_id, "dead", heartbeat=True)
    alive = Worker(url, job_id, "alive", heartbeat=True)
    try:
        t = dead.ask()
        dead.storage.record_heartbeat(t._trial_id)
        assert dead.claim(t, 1)
        mine = alive.ask()
        assert not alive.claim(mine, 1)
        # the grace period is TRIAL_GRACE_S (60 s) in the tuner: moved here instead of waiting it out
        alive.storage.grace_period = 1
        time.sleep(2.5)
        optuna.storages.fail_stale_trials(alive.study)
        assert alive.storage.get_trial(t._trial_id).state == TS.FAIL
        assert alive.storage.get_trial(mine._trial_id).state == TS.RUNNING    # no heartbeat yet: not stale
        assert alive.claim(mine, 1)
    finally:
        dead.close()
        alive.close()


def test_a_result_is_stored_only_while_its_trial_is_running(job):
    url, job_id = job
    w = Worker(url, job_id, "w")
    ctx = RunContext(url, job_id, worker_id="w")
    recorder = Recorder(ctx)
    try:
        t, gone = w.ask(), w.ask()
        w.study.tell(gone, state=TS.FAIL)         # failed by another worker: its config re-queued there
        assert not recorder.store(Result(gone.number, {"n": 1}, "ok", [1.0]), while_running=gone._trial_id)
        assert recorder.store(Result(t.number, {"n": 2}, "ok", [1.0]), while_running=t._trial_id)
        assert recorder.count_done() == 1
    finally:
        ctx.close()
        w.close()


def test_failing_a_trial_waits_for_its_result_being_stored(job):
    """The store's transaction holds the trial's row (PostgreSQL) or the write lock (SQLite): another
    worker failing the trial meanwhile waits, then finds the result (and re-queues nothing)."""
    url, job_id = job
    storing = Worker(url, job_id, "storing")
    failing = Worker(url, job_id, "failing")
    try:
        t = storing.ask()
        failed = threading.Event()

        def fail():
            failing.storage.set_trial_state_values(t._trial_id, TS.FAIL)
            failed.set()

        with storing.Session.begin() as s:
            repo.hold_job_row(s, job_id)
            assert study_reads.trial_state(s, t._trial_id, lock=True) == "RUNNING"
            thread = threading.Thread(target=fail)
            thread.start()
            assert not failed.wait(1.0)           # held off until the result is committed
            repo.store_trial(s, job_id=job_id, number=t.number, config={"n": 1}, status="ok", samples_ms=[1.0],
                             median_ms=1.0, spread=None, error=None, worker="storing")
        thread.join(30)
        assert failed.is_set()
        with failing.Session() as s:              # what the failing worker's re-queue reads next
            assert repo.count_trials(s, job_id) == 1
    finally:
        storing.close()
        failing.close()


def test_a_sharing_worker_pops_the_queue_only_when_trials_wait_in_it(job):
    """JobStudy.ask creates a new trial without Optuna's pop (a sync of every unfinished trial) when
    the budget's count saw the queue empty; a config queued meanwhile is asked next."""
    from jobspec.device import interpreter_properties
    from tuner.study import JobStudy

    url, job_id = job
    ctx = RunContext(url, job_id, worker_id="w")
    try:
        assert ctx.load()
        recorder = Recorder(ctx)
        study = JobStudy(ctx, recorder)
        study.open(interpreter_properties(), "cpu")
        queued = [t for t in study.study.get_trials(deepcopy=False) if t.state == TS.WAITING]
        assert queued                                     # the known-good configs, enqueued by the claimer
        pops, pop = [], study.study._pop_waiting_trial_id
        study.study._pop_waiting_trial_id = lambda: (pops.append(1), pop())[1]
        asked = []
        for _ in range(len(queued) + 2):
            trial = study.ask(mine=len(asked))
            study.suggest(trial)
            study.settled(trial, in_flight=True)
            asked.append(trial)
        by_id = {t._trial_id: t for t in study.study.get_trials(deepcopy=False)}
        fixed = [t.system_attrs["fixed_params"] for t in queued]
        assert [by_id[t._trial_id].params for t in asked[:len(queued)]] == fixed
        assert all(by_id[t._trial_id].state == TS.RUNNING for t in asked)
        study.study.enqueue_trial(fixed[0])               # re-queued (a dead worker's config)
        again = study.ask(mine=len(asked))
        study.suggest(again)
        assert again.params == fixed[0]
        assert len(pops) == len(queued) + 1               # not for the two asked with the queue empty
        assert [t.number for t in asked + [again]] == sorted({t.number for t in asked + [again]})
    finally:
        study.close()
        ctx.close()


def test_a_trial_refused_its_claim_is_given_back(job):
    """JobStudy: another worker holds the budget's last place; this worker's trial is refused, failed
    as over budget, its config queued again, and with nothing of its own in flight the rest of the
    budget is elsewhere. Once the other's trial fails (its worker died), the config is claimed."""
    from jobspec.device import interpreter_properties
    from tuner.study import JobStudy

    url, job_id = job
    ctx = RunContext(url, job_id, worker_id="w")
    other = Worker(url, job_id, "other")
    study = None
    try:
        assert ctx.load()
        budget = ctx.spec.budget.trials
        study = JobStudy(ctx, Recorder(ctx))
        study.open(interpreter_properties(), "cpu")
        for _ in range(budget):
            assert other.claim(other.ask(), budget)     # the other worker's trials fill the budget
        held = [t for t in other.study.get_trials(deepcopy=False) if t.state == TS.RUNNING]
        assert study.ask(mine=0) is None                # the count sees no room: nothing asked
        trial = study.study.ask()                       # one asked before the other's claims (a race)
        study.budget_elsewhere = False
        config = study.suggest(trial)
        assert not study.claim(trial, 0)
        study.give_back(trial, config)
        study.settled(trial, in_flight=False)
        assert study.budget_elsewhere
        gone = other.storage.get_trial(trial._trial_id)
        assert gone.state == TS.FAIL and gone.user_attrs["over_budget"] is True
        waiting = [t for t in study.study.get_trials(deepcopy=False) if t.state == TS.WAITING]
        assert study.space.encode(config) in [t.system_attrs["fixed_params"] for t in waiting]
        other.study.tell(held[-1].number, state=TS.FAIL)        # one of the other's trials failed before its result
        again = study.ask(mine=0)
        assert again is not None and study.claim(again, 0)
    finally:
        if study is not None:
            study.close()
        ctx.close()
        other.close()
