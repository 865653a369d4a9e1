"""Which re-measurement rounds kept in the study a job's winner is picked from (tuner/final_rounds.py),
in whole interpret-mode runs: the real engine, child, pool, study and database. Rounds other workers
left are planted in the study when the search stops, before the run re-measures."""
from __future__ import annotations

import time

import optuna
import sqlalchemy as sa

from db import migrate
from db.engine import make_engine, session_factory
from db.models import Job, Trial
from jobspec.model import JobSpec
from kernels import example
from tuner.engine import run_job
from tuner.final_rounds import ATTR_PREFIX, Round, read_rounds
from tuner.space import config_key
from tuner.submission import create_job_from_spec

INTERP = "blocktune interpreter (CPU)"
SLOW_MS = 1000.0       # another worker's valid round: it outnumbers this run's samples in the pooled medians
BOGUS_MS = 1e-9        # rounds that must not count: were they pooled, they would set the medians


def _ok_configs(url: str, job_id: int) -> list[dict]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            return [t.config for t in s.scalars(sa.select(Trial).where(Trial.job_id == job_id, Trial.status == "ok"))]
    finally:
        engine.dispose()


def test_the_winner_is_picked_from_rounds_of_the_final_finalists_on_this_gpu_model(database_url):
    """Counted: a finished round of another worker on this GPU model that holds every final
    finalist (its samples are pooled; this run measures only the rounds still missing). Not counted:
    a round from another GPU model, a round whose finalists miss one of the final ones (measured
    before a later trial entered the top few), a round under way for longer than a round can take
    (its worker died: nobody waits for it)."""
    spec = example("vector_add", N=3000)
    spec["space"] = {"BLOCK_SIZE": [128, 256, 512, 1024], "num_warps": [1, 2, 4]}
    spec["budget"] = {"trials": 6}
    spec["sampler"] = "random"
    spec["measure"] = {"remeasure_top": 2, "remeasure_rounds": 3}
    migrate.upgrade(database_url)
    job_id = create_job_from_spec(database_url, JobSpec.model_validate(spec))
    events: list[tuple[str, dict]] = []

    def plant(name: str, rnd: Round) -> None:
        study = optuna.load_study(study_name=f"job-{job_id}", storage=database_url)
        study.set_user_attr(ATTR_PREFIX + name, rnd.to_json())

    def on_event(kind, data):
        events.append((kind, data))
        if kind != "stop":
            return
        keys = [config_key(c) for c in _ok_configs(database_url, job_id)]     # every finalist is among them
        now, n = time.time(), len(keys)
        plant("ghost:1", Round("ghost", INTERP, keys, now - 5, [[SLOW_MS] * 100] * n, [None] * n, 0.1))
        plant("a100:1", Round("a100", "NVIDIA A100-SXM4-80GB", keys, now - 5, [[BOGUS_MS] * 300] * n, [None] * n, 0.1))
        plant("early:1", Round("early", INTERP, keys[:1], now - 5, [[BOGUS_MS] * 300], [None], 0.1))
        plant("dead:1", Round("dead", INTERP, keys, now - 100_000))

    t0 = time.monotonic()
    run_job(database_url, job_id, interpret=True, worker_id="test:cpu0", on_event=on_event)
    assert time.monotonic() - t0 < 120

    engine = make_engine(database_url)
    with session_factory(engine)() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        best_ms = job.best_time_ms
    engine.dispose()
    study = optuna.load_study(study_name=f"job-{job_id}", storage=database_url)
    remeasured = study.user_attrs["remeasured_ms"]
    assert len(remeasured) >= 2 and set(remeasured.values()) == {SLOW_MS} and best_ms == SLOW_MS
    # two workers take part (this one and "ghost"; not "dead"): the two whole rounds still missing
    # are measured here as four half rounds
    mine = [r for r in read_rounds(study) if r.worker == "test:cpu0"]
    assert len(mine) == 4 and all(r.finished and r.gpu_model == INTERP and r.holds(list(remeasured)) for r in mine)
    assert [r.part for r in mine] == [0.5] * 4
    done = next(d for k, d in events if k == "done")
    tl = done["timeline"]
    assert tl["final_rounds"] == 4 and tl["final_rounds_here"] == 4 and tl["final_rounds_elsewhere"] == 1
    assert tl["final_round_part"] == 0.5
    assert tl.get("remeasure_wait_s", 0.0) < 1.0                  # the dead worker's round was not waited for
    rounds = [d for k, d in events if k == "round"]
    assert len(rounds) == 4 and all(d["final"] and not any(d["errors"]) and d["part"] == 0.5 for d in rounds)


def test_a_round_measured_while_the_last_compiles_finish_counts_for_the_end(database_url, monkeypatch):
    """At the end of the trial budget, a child that would wait for a straggling compile measures a
    round of the finalists as they stand (FinalRounds.round_while_waiting). Here the straggler is
    planted: once every trial of the budget is asked, the next wait for a compile takes a round
    first. The round is kept in the study; the final re-measurement counts it (the finalists did not
    change after it) and measures only the rounds still missing."""
    from tuner.engine import Tuner

    spec = example("vector_add", N=3000)
    spec["space"] = {"BLOCK_SIZE": [128, 256, 512, 1024], "num_warps": [1, 2, 4]}
    spec["budget"] = {"trials": 6}
    spec["sampler"] = "random"
    spec["lookahead"] = 1
    spec["measure"] = {"remeasure_top": 2, "remeasure_rounds": 3}
    migrate.upgrade(database_url)
    job_id = create_job_from_spec(database_url, JobSpec.model_validate(spec))
    measured = []
    real_next = Tuner._next_compiled

    def next_compiled(self, pending):
        # the last trial is asked, and the results so far make the finalists: the planted straggler
        if not measured and self.recorder.done + len(pending) >= 6 and self.recorder.done >= 2:
            measured.append((self.recorder.done, self.final_rounds.round_while_waiting()))
        return real_next(self, pending)

    monkeypatch.setattr(Tuner, "_next_compiled", next_compiled)
    events: list[tuple[str, dict]] = []
    run_job(database_url, job_id, interpret=True, worker_id="test:cpu0", on_event=lambda k, d: events.append((k, d)))
    assert [ok for _, ok in measured] == [True], measured
    engine = make_engine(database_url)
    with session_factory(engine)() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
    engine.dispose()
    rounds = [d for k, d in events if k == "round"]
    assert [d["final"] for d in rounds][0] is False and len(rounds) >= 3
    done = next(d for k, d in events if k == "done")
    tl = done["timeline"]
    assert tl["rounds_while_compiling"] == 1
    study = optuna.load_study(study_name=f"job-{job_id}", storage=database_url)
    remeasured = list(study.user_attrs["remeasured_ms"])
    assert len(read_rounds(study)) == len(rounds) == tl["final_rounds"]
    if {config_key(c) for c in rounds[0]["finalists"]} >= set(remeasured):
        # the finalists stood: the early round is one of the three, so the end measured two
        assert len(rounds) == 3
    else:
        # a later trial entered the top few: the early round is stale, three more were measured
        assert len(rounds) == 4


def test_a_part_of_a_round_takes_that_part_of_every_bound_of_a_measurement(tmp_path):
    """A worker of two measures half rounds (tuner/child.py Bench.measure `part`): half the repeat
    time, and half the warm-up and of the minimum and maximum repeats too, so that two halves cost a
    round also for a kernel long enough that `min_reps` decides. Checked on the arguments the GPU
    timer gets (the timer is the one part replaced here) and on the CPU protocol's samples."""
    from tuner.child import Bench, Runtime
    from tuner.measure import Measurement

    spec = example("vector_add", N=4096)
    spec["measure"] = {"warmup_ms": 20.0, "rep_ms": 100.0, "min_reps": 10, "max_reps": 1000}
    bench = Bench({"spec": spec, "workdir": str(tmp_path)}, Runtime({"interpret": True, "device": 0}))
    run = bench.launcher({"BLOCK_SIZE": 256, "num_warps": 4}, None)
    cpu_whole = bench.measure(run, rep_scale=10).samples_ms     # 1 s of repeats allowed: max_reps decides
    cpu_half = bench.measure(run, rep_scale=10, part=0.5).samples_ms
    assert len(cpu_whole) == 5 and len(cpu_half) == 3

    class RecordingTimer:
        def __init__(self):
            self.calls: list[dict] = []

        def measure(self, fn, reset, **kw):
            self.calls.append(kw)
            return Measurement([1.0])

    bench.timer, bench.interpret = RecordingTimer(), False
    bench.measure(run, rep_scale=0.4)
    bench.measure(run, rep_scale=0.2, part=0.5)
    whole, half = bench.timer.calls
    assert (whole["warmup_ms"], whole["rep_ms"], whole["min_reps"], whole["max_reps"]) == (20.0, 40.0, 10, 1000)
    assert (half["warmup_ms"], half["rep_ms"], half["min_reps"], half["max_reps"]) == (10.0, 20.0, 5, 500)
