"""The end of a job: the finalists re-measured in rounds that the workers sharing the job split.

The finalists are the `remeasure_top` best configs of the search and the default config. A round
measures each of them once, interleaved, on one worker's GPU (tuner.child's remeasure op); rounds are
kept in the job's Optuna study, one user attribute per round (`final_round:<worker>:<n>`: the
finalists, the samples, the worker, its GPU model, when). The winner is picked from the pooled
samples of at least `remeasure_rounds` finished rounds of the final finalists, every one measured on
the job's GPU model. Each round holds every finalist, so whatever differs between rounds — the GPU
it ran on, clocks, temperature — hits them all alike: the same balanced design as a single worker's
interleaved rounds, with the rounds spread over the job's workers.

Workers take part as they run out of trials:
  - a worker whose share of the trial budget is spent while others still run trials (a helper)
    measures rounds of the finalists as they stand. A trial recorded later that enters the top few
    makes those rounds stale (they do not hold it) and they are not used; otherwise they count. A
    helper leaves once there are enough rounds of the finalists as they stand: if the last trials
    change nothing, the last worker publishes at once;
  - the worker that ends the search (and a helper, once every trial of the budget is recorded)
    freezes the finalists and measures rounds until there are enough, counting those that others
    finish meanwhile; whoever sees enough rounds first publishes (db.repo.succeed_job lets one win).
A worker marks a round as begun before measuring it, so that the others start only rounds still
needed and wait for those under way; a mark older than a round can take is ignored (its worker died).
A local run (no other workers) measures its rounds the same way.

Where k workers take part in the job (they recorded its trials or measure its rounds), each measures
1/k of a round at a time (`Round.part`: that part of the repeats, the warm-up and the repeat bounds,
tuner/child.py), and the rounds needed are counted in whole rounds: 5 rounds shared by two workers
are ten half rounds, five each, where whole rounds would split 3/2 and the job would wait for the
third (on the H100 fleet, 0.24 s a round of four 0.2 ms finalists).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from tuner.compile_queue import CompileQueue
from tuner.isolation import ChildError
from tuner.measurement import Measurement
from tuner.recording import Recorder
from tuner.results import Result, median
from tuner.run_context import RunContext
from tuner.space import config_key
from tuner.study import JobStudy

log = logging.getLogger("blocktune.tuner")

ATTR_PREFIX = "final_round:"
POLL_S = 0.05              # how often a worker waiting for others' rounds looks again
MAX_SPLIT = 4              # the smallest part of a round a worker measures is 1/MAX_SPLIT


@dataclasses.dataclass
class Round:
    """One round of the final re-measurement, as kept in the study."""
    worker: str
    gpu_model: str
    finalists: list[str]                        # config keys, in the order measured
    started: float                              # wall clock (time.time())
    samples: list[list[float]] | None = None    # per finalist; None while the round is under way
    errors: list[str | None] | None = None
    seconds: float | None = None
    part: float = 1.0                           # the part of a whole round it measures (see the module doc)
    ended: float | None = None                  # wall clock; after `started` by its compiles' wait + `seconds`

    @property
    def finished(self) -> bool:
        return self.samples is not None

    def holds(self, keys: list[str]) -> bool:
        return set(keys) <= set(self.finalists)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def whole_rounds(rounds: list[Round]) -> float:
    """How many whole rounds `rounds` add up to (a tolerance for parts like 1/3)."""
    return sum(r.part for r in rounds) + 1e-9


def read_rounds(study) -> list[Round]:
    """Every round kept in the study (optuna.Study), finished or under way."""
    out = []
    for name, value in study.user_attrs.items():
        if name.startswith(ATTR_PREFIX) and isinstance(value, dict):
            try:
                out.append(Round(**value))
            except TypeError:
                log.warning("ignoring a malformed re-measurement round %s in study %s", name, study.study_name)
    return out


@dataclasses.dataclass
class Outcome:
    """What the re-measurement decided: the finalists, the default config's result (None when it has
    none), and the re-measured medians of those with a clean re-measurement (config key → ms)."""
    finalists: list[Result]
    default: Result | None
    remeasured: dict[str, float]


class FinalRounds:
    def __init__(self, ctx: RunContext, study: JobStudy, recorder: Recorder, measurement: Measurement,
                 queue: CompileQueue):
        self.ctx, self.study, self.recorder, self.measurement, self.queue = ctx, study, recorder, measurement, queue
        self._seq: int | None = None

    # --- who the finalists are -------------------------------------------------------------------

    def finalists(self) -> tuple[list[Result], Result | None]:
        """The best `remeasure_top` results known (at least one) and the default config's result
        (appended to the finalists when it ran correctly and is not among them)."""
        seen = self.recorder.seen
        ok = sorted((r for r in seen.values() if r.median_ms is not None), key=lambda r: (r.median_ms, r.number))
        finalists = ok[: max(1, self.ctx.spec.measure.remeasure_top)]
        default = None
        if self.study.default_config is not None:
            default = seen.get(config_key(self.study.default_config))
            if default is not None and default.median_ms is not None and default not in finalists:
                finalists = finalists + [default]
        return finalists, default

    # --- the rounds ------------------------------------------------------------------------------

    def run(self, *, finisher: bool) -> Outcome | None:
        """Take part in the re-measurement (see the module doc): the outcome once there are enough
        rounds of the final finalists; None when this worker leaves it to others (a helper that has
        done what helps, the job ended elsewhere, the run asked to stop) or when no config ran
        correctly."""
        ctx, tl = self.ctx, self.ctx.timeline
        need = ctx.spec.measure.remeasure_rounds
        gpu_model = self.measurement.gpu_model
        frozen: tuple[list[Result], Result | None] | None = None
        failed_here = False
        tl.mark("remeasure_start")
        tl.add("remeasure", 0.0)
        while True:
            if frozen is None:
                ctx.retry(self.recorder.count_done, "counting the recorded trials")
                ctx.retry(self.recorder.sync, "reading the recorded trials")
                total = self.study.trials_total
                if finisher or (total is not None and self.recorder.done >= total):
                    # every trial of the budget is recorded (no worker can record one more): final
                    frozen = self.finalists()
                    tl.mark("finalists_final")
                    ctx.on_event("remeasure", {"configs": [r.config for r in frozen[0]]})
            finalists, default = frozen or self.finalists()
            if not finalists:
                return None
            keys = [config_key(r.config) for r in finalists]
            rounds = self._rounds_of(keys)
            done = [r for r in rounds if r.finished]
            if frozen is not None and (whole_rounds(done) >= need or failed_here):
                return self._outcome(finalists, default, done)
            if ctx.retry(self.recorder.job_state, "reading the job's state") != "running" or ctx.should_stop():
                return None
            if frozen is None and (whole_rounds(done) >= need or failed_here):
                return None            # enough rounds of the finalists as they stand: the last worker decides
            under_way = [r for r in self._live(rounds) if not r.finished and r.worker != ctx.run_name]
            if whole_rounds(done + under_way) >= need:
                with tl.phase("remeasure_wait"):
                    time.sleep(POLL_S)
                continue
            # a round that failed here (a config's error, the GPU child lost) ends this worker's part,
            # as it ended a single worker's re-measurement: what is measured so far decides
            failed_here = not self._measure_round(finalists, keys, final=frozen is not None,
                                                  part=self._part(rounds))

    def round_while_waiting(self) -> bool:
        """One round of the finalists as they stand, measured while the search's child would wait for
        its last compiles (engine.py `_round_while_compiling`): the same round a helper measures,
        stale if a later trial enters the top few. Only while fewer rounds of them than needed are
        done or under way, and once each is compiled here (those that are not are submitted now,
        for a later round). False when it measured none."""
        ctx = self.ctx
        if ctx.spec.measure.remeasure_top <= 0:
            return False
        finalists, _ = self.finalists()
        if not finalists:
            return False
        configs = [r.config for r in finalists]
        missing = [c for c in configs if not self.queue.has(c)]
        if missing:
            self.queue.compile_ahead(missing)
            return False
        keys = [config_key(c) for c in configs]
        rounds = self._rounds_of(keys)
        if whole_rounds(self._live(rounds)) >= ctx.spec.measure.remeasure_rounds:
            return False
        ctx.timeline.count("rounds_while_compiling")
        return self._measure_round(finalists, keys, final=False, part=self._part(rounds))

    def _rounds_of(self, keys: list[str]) -> list[Round]:
        """The rounds kept in the study, finished or under way, on this worker's GPU model, that hold
        every one of the finalists `keys`."""
        gpu_model = self.measurement.gpu_model
        return [r for r in self.ctx.retry(lambda: read_rounds(self.study.study), "reading the re-measurement")
                if r.gpu_model == gpu_model and r.holds(keys)]

    def _part(self, rounds: list[Round]) -> float:
        """The part of a round to measure next: 1/k where k workers take part in the job (this one,
        those that recorded its trials or measured rounds of these finalists, not one whose round
        has been under way too long: it died), at most MAX_SPLIT."""
        if not self.ctx.shared:
            return 1.0
        workers = self.recorder.workers | {r.worker for r in self._live(rounds)} | {self.ctx.run_name}
        return 1.0 / min(len(workers), MAX_SPLIT)

    def _live(self, rounds: list[Round]) -> list[Round]:
        """The rounds finished or under way for less time than a round can take (an older mark's
        worker died: nobody waits for it, and it takes no part in the job)."""
        now = time.time()
        return [r for r in rounds if r.finished or now - r.started < self._round_limit_s(len(r.finalists))]

    def _round_limit_s(self, n: int) -> float:
        """How long a round may be under way before its worker is taken for dead."""
        return self.ctx.spec.measure.timeout_s * n + 60.0

    def _next_name(self) -> str:
        if self._seq is None:
            mine = f"{ATTR_PREFIX}{self.ctx.run_name}:"
            taken = [int(k[len(mine):]) for k in self.ctx.retry(lambda: self.study.study.user_attrs,
                                                                 "reading the re-measurement")
                     if k.startswith(mine) and k[len(mine):].isdigit()]
            self._seq = max(taken, default=0)
        self._seq += 1
        return f"{ATTR_PREFIX}{self.ctx.run_name}:{self._seq}"

    def _measure_round(self, finalists: list[Result], keys: list[str], *, final: bool, part: float = 1.0) -> bool:
        """One round (or the `part` of one) on this worker's GPU, marked as under way first; False
        when the child failed it."""
        ctx, study = self.ctx, self.study.study
        name = self._next_name()
        rnd = Round(worker=ctx.run_name, gpu_model=self.measurement.gpu_model, finalists=keys, started=time.time(),
                    part=part)
        if ctx.shared:
            ctx.retry(lambda: study.set_user_attr(name, rnd.to_json()), "marking a re-measurement round")
        compiled = self.queue.compiled_for_all([r.config for r in finalists])
        items = [{"config": r.config, "compiled": c} for r, c in zip(finalists, compiled)]
        rep_scale = 2.0 / max(1, ctx.spec.measure.remeasure_rounds) * part
        t = time.monotonic()
        try:
            resp = self.measurement.remeasure_round(items, rep_scale, part)
        except ChildError as exc:
            log.warning("job %d: re-measurement round failed on this worker (%s)", ctx.job_id, exc)
            resp = None
        if resp is None:
            if ctx.shared:
                ctx.retry(lambda: study.set_user_attr(name, None), "withdrawing a re-measurement round")
            return False
        rnd.samples = [[float(f"{x:.6g}") for x in s] for s in resp["samples_ms"]]
        rnd.errors = list(resp["errors"])
        rnd.seconds = round(time.monotonic() - t, 4)
        rnd.ended = time.time()
        ctx.retry(lambda: study.set_user_attr(name, rnd.to_json()), "storing a re-measurement round")
        tl = ctx.timeline
        tl.count("final_rounds")
        ctx.on_event("round", {"worker": ctx.run_name, "finalists": [r.config for r in finalists], "final": final,
                               "errors": rnd.errors, "seconds": rnd.seconds, "part": part})
        return not any(rnd.errors)

    def _outcome(self, finalists: list[Result], default: Result | None, done: list[Round]) -> Outcome:
        """Pooled medians over the finished rounds; a finalist with an error in any round keeps its
        search median (as a config that failed its re-measurement gets no second, fairer number)."""
        remeasured: dict[str, float] = {}
        for r in finalists:
            key = config_key(r.config)
            pooled: list[float] = []
            clean = True
            for rnd in done:
                i = rnd.finalists.index(key)
                if rnd.errors and rnd.errors[i]:
                    clean = False
                    break
                pooled.extend(rnd.samples[i])
            if clean and pooled:
                remeasured[key] = median(pooled)
        here = [rnd for rnd in done if rnd.worker == self.ctx.run_name]
        tl = self.ctx.timeline
        tl.details["final_rounds_here"] = len(here)
        tl.details["final_rounds_elsewhere"] = len(done) - len(here)
        tl.details["final_round_part"] = min((rnd.part for rnd in here), default=1.0)
        return Outcome(finalists, default, remeasured)
