"""The tuning engine: `run_job(db_url, job_id, ...)`.

One run of a job:
  1. loads the job and its spec, marks it running, launches the GPU child (it owns the CUDA context,
     or the CPU interpreter with interpret=True; a service worker's warm child, tuner/standby.py,
     builds only the job's inputs and reference) and starts every compile worker — neither is
     waited for: the device's properties come from the driver in the parent (no CUDA context), so
     steps 2 and 3's first compiles overlap the child's start-up (torch, CUDA, the inputs);
  2. creates or resumes the job's Optuna study (RDBStorage on the same database, `job-<id>`),
     enqueueing known-good configs first (the previous winner, the default config, the spec's list);
     a run that creates the study submits the first of those compiles before opening it, since
     they are what its first asks return;
  3. asks Optuna for configs ahead of the GPU (`lookahead`; by default every queued known-good
     config, up to 2 per compile worker, then 2 for TPE and 2 per compile worker for samplers that
     learn nothing from results): constraint violations and repeats are answered at
     once; the rest are compiled in the pool (to a cubin when a suitable ptxas is there), then run,
     checked against the reference and measured in the child; the first config goes to the child
     as soon as it is compiled and the inputs exist (the rest of the lookahead is asked while it
     runs), and each next config before the previous result is recorded. A hang kills the child
     (timeout), a fault restarts it (runtime-error); every trial is recorded (tuning_trials) and
     told to Optuna (failures as infeasible, so constraint-aware TPE learns from them) — the tell
     and the job's progress on a thread of their own (write_behind.py), drained when the search ends;
  4. stops on the budget (evaluated trials and/or seconds), on patience (N evaluated trials without
     improvement), when the space is exhausted, when the job leaves `running` (cancelled), or when
     `should_stop()` is true (the job stays resumable);
  5. re-measures the best few configs and the default one in interleaved rounds, and stores the
     winner (jobs.best_config / best_time_ms and best_configs). Workers sharing a job split the rounds
     (tuner/final_rounds.py): one that runs out of trials measures rounds while the others finish.
Where the time went (tuner/timeline.py) is logged at the end and sent with the "done" event.

The parts of a run, each in its module, over what they share (run_context.py: the job, its
database, the timeline, the job's lock and retries through outages):
  study.py          the Optuna study and the search space: asking, telling, sharing the study
  compile_queue.py  configs compiled ahead of the GPU, and the lookahead
  measurement.py    the device and the child that runs and measures configs on it
  recording.py      trials, progress and the winner in the database; the results known so far
  write_behind.py   Optuna's tell of a stored result and the job's progress, written while the search goes on
  trial_claims.py   a shared job's trial budget, claimed trial by trial before a config is measured
  final_rounds.py   the finalists' re-measurement, in rounds the workers sharing the job split
This module is the run itself: the search loop that feeds configs from the study through the
compile queue to the child and records what comes back, and the end (re-measuring, the winner).

Workers sharing a job (service workers, `worker_id` given) keep the trial budget exact without
taking turns: each asks Optuna on its own (its RDB storage makes an ask one transaction; on SQLite
the asks still take the job's lock, db.job_lock) and, before measuring a config, claims its trial
(tuner/trial_claims.py: one short transaction on the job's row, admitted while the trials recorded
and claimed leave room); a result is stored only while its trial is still RUNNING, in the same
transaction as its row (Recorder.store), and told to Optuna after it. Their in-flight trials carry
Optuna heartbeats, and a trial whose heartbeat stopped (its worker died) is failed, which frees its
claim, and its config re-queued. Every database call of a run is
retried through outages (db.retry): a measured result waits in memory until it is written.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import logging
import threading
import time
import traceback
from typing import Any, Callable

import optuna

from db import repo
from db.retry import is_unavailable
from tuner.compile_queue import CompileQueue
from tuner.final_rounds import FinalRounds
from tuner.first_run import FirstRun
from tuner.isolation import ChildCrashed, ChildTimeout
from tuner.measurement import Measurement
from tuner.recording import Recorder
from tuner.relay import ChildRelay
from tuner.results import InFlight, Result
from tuner.run_context import EventFn, RunContext
from tuner.space import config_key
from tuner.standby import Standby
from tuner.study import JobStudy
from tuner.timeline import Timeline, format_timeline
from tuner.write_behind import WriteBehind

__all__ = ["Tuner", "run_job"]

log = logging.getLogger("blocktune.tuner")

CONSTRAINT_PREFIX = repo.UNCOUNTED_ERROR_PREFIX
# while the child runs a config and the next one is compiling, how often the search looks whether
# that compile is done, so as to stage it for the relay (tuner/relay.py) before the answer comes
STAGE_POLL_S = 0.002
# a child left without work longer than this after an answer is noted in the timeline (child_gaps)
CHILD_GAP_NOTED_S = 0.02
# at the end of the trial budget, a compile under way this long is a straggler: the child measures
# a round of the finalists while it finishes (Tuner._round_while_compiling)
STRAGGLER_S = 0.5
# configs kept asked ahead (the one in the child, the one staged after it, one compiling) before the
# asks stop to serve a child that waits for the run's thread (Tuner._child_wants)
AHEAD_BEFORE_SERVING = 3


class Tuner:
    """One run of one job: see the module doc."""

    def __init__(self, db_url: str, job_id: int, *, device: int = 0, interpret: bool = False,
                 worker_id: str | None = None, should_stop: Callable[[], bool] | None = None,
                 on_event: EventFn | None = None, compile_workers: int | None = None, reclaimed: bool = False,
                 standby: Standby | None = None):
        self.ctx = ctx = RunContext(db_url, job_id, worker_id=worker_id, should_stop=should_stop, on_event=on_event)
        self.recorder = Recorder(ctx)
        self.study = JobStudy(ctx, self.recorder, reclaimed=reclaimed)
        self.measurement = Measurement(ctx, device=device, interpret=interpret, standby=standby)
        self.queue = CompileQueue(ctx, self.measurement, workers=compile_workers, standby=standby)
        self.final_rounds = FinalRounds(ctx, self.study, self.recorder, self.measurement, self.queue)
        self.write_behind = WriteBehind(ctx)
        self.relay: ChildRelay | None = None          # from the first run to the search's end
        self.first_run = FirstRun()                    # the first config, sent before its trial (first_run.py)
        self.stop_reason: str | None = None
        self.timeline_data: dict[str, Any] | None = None
        self.t0 = time.monotonic()
        self._recompile = False         # the child's device differs from what the first compiles were for
        self._known_good_keys: set[str] = set()    # the job's known-good configs (read as the search starts)
        self._first_configs: list[dict[str, Any]] = []   # compiled before the study opened

    @property
    def timeline(self) -> Timeline:
        return self.ctx.timeline

    # --- the run -------------------------------------------------------------------------------

    def run(self) -> None:
        ctx = self.ctx
        ctx.timeline = tl = Timeline()
        if not ctx.retry(ctx.load, "loading the job"):
            self.close()          # finished already: nothing was started
            return
        self.t0 = time.monotonic()
        try:
            # the GPU child and the compile workers start first; the device's properties come from the
            # driver in the parent, so that the study opens and the first compiles go out while the
            # child is still starting
            self.measurement.launch()
            self.queue.start()
            with tl.phase("props"):
                props = self.measurement.parent_props()
            if props is None:
                self._child_ready()            # no driver answer here: the child's
            else:
                self.measurement.set_props(props)
            if not self.measurement.interpret:
                ctx.retry(lambda: self.recorder.record_gpu(self.measurement.props), "recording the GPU")
            first = (ctx.fresh or ctx.joining) and self.measurement.props is not None
            if first:
                ctx.retry(self._compile_first_configs, "reading the known-good configs")
            self._open_study(send_first=first and bool(self.queue.early))
            self.study.start_heartbeats()
            spec = ctx.spec
            tl.details["lookahead"] = spec.lookahead if spec.lookahead is not None else "auto"
            ctx.on_event("start", {"job_id": ctx.job_id, "study": ctx.study_name, "sampler": self.study.sampler_kind,
                                   "total": self.study.trials_total, "space": self.study.space.size,
                                   "valid": self.study.n_valid, "gpu_model": self.measurement.gpu_model,
                                   "seconds": spec.budget.seconds})
            self.search()
            if ctx.retry(self.recorder.job_state, "reading the job's state") != "running" or ctx.should_stop():
                return   # cancelled, finished by another worker, or stopped: resumable
            # the rest of the trial budget in flight on other workers: this one re-measures meanwhile
            self.finalize(finisher=not self.study.budget_elsewhere)
        except Exception as exc:
            if is_unavailable(exc):
                # stopped while the database was unreachable: not the job's failure
                log.warning("job %d: stopped while the database is unavailable; the job stays running and "
                            "resumes when claimed again", ctx.job_id)
                return
            log.exception("job %d failed", ctx.job_id)
            self.recorder.fail(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}")
            ctx.on_event("failed", {"error": f"{type(exc).__name__}: {exc}"})
        finally:
            if self.timeline_data is None:      # stopped, cancelled or failed: where the time went so far
                tl.add("total", tl.since_start())
                log.info("job %d timeline (not finished):\n%s", ctx.job_id, format_timeline(tl.as_dict(), indent="  "))
            self.close()

    def _compile_first_configs(self) -> None:
        """A fresh study's first asks are its known-good configs, in order: their compiles go out
        now, while the study opens (a few tenths of a second on PostgreSQL), so that the first
        config is compiled by the time the child has made the inputs — the start's critical path.
        A worker joining a job nothing was recorded for yet: the claimer asks the known-good
        configs; this one draws its first random configs now (JobStudy.first_draws) and compiles
        them, its sampler proposing them for its first asks."""
        spec, m = self.ctx.spec, self.measurement
        n = self.queue.workers if spec.lookahead is None else min(self.queue.workers, max(1, spec.lookahead))
        if self.ctx.joining:   # random draws: as many as a random sampler's lookahead (TPE: capped there)
            depth = self.queue.auto_depth() if spec.lookahead is None else min(self.queue.auto_depth(), max(1, spec.lookahead))
            self._first_configs = self.study.first_draws(m.props, m.gpu_model, depth)
        else:
            self._first_configs = self.study.first_configs(m.props, m.gpu_model, n)
        self.queue.prefetch(self._first_configs)

    def _open_study(self, *, send_first: bool) -> None:
        """Open the Optuna study; with `send_first`, on a thread of its own while this one sends the
        first config compiled ahead to the child (tuner/first_run.py: the study's opening and first
        asks were the start's critical path)."""
        ctx, m, tl = self.ctx, self.measurement, self.ctx.timeline
        props, gpu_model = m.props, m.gpu_model

        def open_study() -> None:
            with tl.phase("study_open"):
                ctx.retry(lambda: self.study.open(props, gpu_model), "opening the Optuna study")

        if not send_first:
            open_study()
            return
        failed: list[BaseException] = []

        def opener() -> None:
            try:
                open_study()
            except BaseException as exc:  # noqa: BLE001 - raised on the run's thread after the join
                failed.append(exc)

        thread = threading.Thread(target=opener, name=f"study-open-{ctx.job_id}", daemon=True)
        thread.start()
        differs = False
        try:
            differs = m.wait_ready()
            if not differs:
                self._send_first_run()
        finally:
            thread.join()
        if failed:
            raise failed[0]
        if differs:
            self._adopt_child_device()

    def _send_first_run(self) -> None:
        """The first of the configs compiled ahead to come back compiled, sent to the ready child
        before its trial exists (the study is opening meanwhile). None sent if every one fails."""
        self._read_known_good_keys()        # read already, to choose the first configs
        first = {config_key(c): c for c in self._first_configs}
        tasks = {k: t for k, t in self.queue.early.items() if k in first}
        deadline = time.monotonic() + self.ctx.spec.measure.compile_timeout_s
        while tasks:
            done = [k for k, t in tasks.items() if self.queue.done(t)]
            if not done:
                futures = [t.future for t in tasks.values() if t.future is not None and not t.lost()]
                left = deadline - time.monotonic()
                if not futures or left <= 0:
                    return       # the search waits for them as for any compile (CompileQueue.result: its timeout)
                cf.wait(futures, timeout=left, return_when=cf.FIRST_COMPLETED)
                continue
            for key in done:
                task = tasks.pop(key)
                res = self.queue.result(task)
                if res.get("status") != "ok":
                    continue
                config, compiled = first[key], res.get("compiled")
                self.queue.early.pop(key, None)
                self.queue.remember(config, compiled)
                self.relay = ChildRelay(self.measurement, self.ctx.spec.measure.timeout_s)
                try:
                    self.relay.send(self._run_request(config, compiled))
                except (ChildTimeout, ChildCrashed) as exc:
                    log.warning("job %d: the first config could not go to the GPU child (%s); the search "
                                "sends it again", self.ctx.job_id, exc)
                    self.queue.early[key] = task
                    return
                self.first_run.sent(config, task)
                return

    def _read_known_good_keys(self) -> None:
        """The job's known-good configs (those that may make the child's reference), when it checks
        outputs."""
        if self.ctx.spec.check.outputs:
            self._known_good_keys = {config_key(c) for _, c in self.study.known_good(self.measurement.gpu_model)}

    def _child_ready(self) -> None:
        """Wait for the child; if its device differs from the parent's, `_adopt_child_device`."""
        if self.measurement.wait_ready():
            self._adopt_child_device()

    def _adopt_child_device(self) -> None:
        """The child's device differs from the parent's: the constraints see the child's and what
        was compiled is redone (`_recompile`)."""
        self.queue.forget()
        self._recompile = True
        if self.study.space is not None:
            self.study.use_device(self.measurement.props)

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        self.write_behind.close()
        self.study.close()
        self.queue.close()
        self.measurement.close()
        self.ctx.close()

    # --- the search ----------------------------------------------------------------------------

    def search(self) -> None:
        ctx, tl, study = self.ctx, self.ctx.timeline, self.study
        pending: collections.deque = collections.deque()
        study.asks = study.repeats = 0
        study.max_asks = 20 * (ctx.spec.budget.trials or 1000) + 1000
        t_search = time.monotonic()
        busy_before = tl.seconds.get("child_busy", 0.0)
        ctx.retry(self.recorder.count_done, "counting the recorded trials")
        ctx.retry(self._read_known_good_keys, "reading the known-good configs")
        inflight: InFlight | None = None
        # the first compiles go out before the GPU child is waited for: they overlap its start-up.
        # Asking stops once the child could take a config (one that may go compiled — the first of
        # the known-good ones to compile, `_eligible` — and the inputs made): the rest of the
        # lookahead is asked while the child runs it
        ctx.retry(self.recorder.sync, "reading the recorded trials")
        if ctx.retry(self._check_stop, "reading the job's state") is None:
            self._fill(pending, self.first_run.inflight,
                       until=lambda: self._compiled_index(pending) is not None and self.measurement.ready_now())
        self._child_ready()
        if self._recompile:     # the child's device differs from what the parent compiled for
            pending = collections.deque((t, c, self.queue.submit(c)) for t, c, _ in pending)
            self._recompile = False
        self.measurement.restore_reference(list(self.recorder.seen.values()), self.queue.compiled_for)
        if self.relay is None:
            self.relay = ChildRelay(self.measurement, ctx.spec.measure.timeout_s)
        inflight = self.first_run.inflight
        staged: InFlight | None = None     # the next config, sent by the relay the moment the child answers
        try:
            while True:
                self.write_behind.check()
                for r, trial in self.first_run.take_ready():
                    self._record(r, trial)
                ctx.retry(self.recorder.sync, "reading the recorded trials")
                self.stop_reason = ctx.retry(self._check_stop, "reading the job's state")
                if self.stop_reason:
                    if staged is not None and self.relay.unstage():
                        pending.appendleft((staged.trial, staged.config, staged.task))
                        staged = None
                    break
                self._record_failed_compiles(pending)
                if inflight is None and pending and self._compiled_index(pending) is not None:
                    inflight = self._dispatch_ready(pending)     # the child is idle: its config first
                staged = self._stage(pending, inflight, staged)
                staged = self._fill(pending, inflight, staged)
                if inflight is None:
                    if not pending:
                        if study.budget_elsewhere:
                            # another worker sharing the job runs its last trials and finishes it
                            self.stop_reason = "the rest of the trial budget is in flight on other workers"
                        elif study.asks >= study.max_asks:
                            self.stop_reason = "sampler keeps proposing known configs"
                        elif self.stop_reason is None:
                            self.stop_reason = (ctx.retry(self._check_stop, "reading the job's state")
                                                or "search space exhausted")
                        break
                    inflight = self._dispatch(*self._next_compiled(pending))
                    staged = self._stage(pending, inflight, staged)
                trial = inflight.trial
                r, staged, sent_next = self._collect(inflight, staged, pending)
                early = self.first_run.answered(inflight, r)    # come before its trial: kept for it
                inflight = None
                if sent_next:
                    inflight, staged = staged, None     # the relay sent it when the answer came
                elif staged is not None:
                    pending.appendleft((staged.trial, staged.config, staged.task))
                    staged = None
                if inflight is None and pending and (early or self._would_continue(r)):
                    inflight = self._dispatch_ready(pending)
                if not early:
                    self._record(r, trial)
                staged = self._stage(pending, inflight, staged)
            # stopped while the next config was in the child (it was sent before the stop could be
            # known: a time budget, a cancel, should_stop). Its answer is read either way (the pipe
            # must be clean for the re-measurement); a run that goes on to finish records it, a
            # cancelled or stopped one puts the trial back in the queue like the other asked ones.
            # The config staged after it likewise, if the relay sent it; else it goes back unsent
            while inflight is not None:
                trial, config = inflight.trial, inflight.config
                r, staged, sent_next = self._collect(inflight, staged)
                if self.first_run.answered(inflight, r):
                    pass                 # its trial was never asked here: nothing to record or put back
                elif self._interrupted():
                    pending.appendleft((trial, config, None))
                else:
                    self._record(r, trial)
                inflight = None
                if sent_next:
                    inflight, staged = staged, None
            if staged is not None:
                pending.appendleft((staged.trial, staged.config, staged.task))
            for r, trial in self.first_run.take_ready():
                self._record(r, trial)
        finally:
            self.relay.close()
        self.write_behind.drain()      # before the elapsed time is saved and the finalists are read
        study.fail_pending(pending)
        ctx.retry(lambda: study.save_elapsed(self._elapsed(), force=True), "saving the elapsed time")
        # kept in the study for the dashboard, which explains why a job ended before its budget
        ctx.retry(lambda: study.save_stop_reason(self.stop_reason), "saving the stop reason")
        tl.add("search", time.monotonic() - t_search)
        m = self.measurement
        if m.first_sent is not None and m.last_answer is not None:
            busy = tl.seconds.get("child_busy", 0.0) - busy_before
            tl.add("child_idle", (m.last_answer - m.first_sent) - busy)
        ctx.on_event("stop", {"reason": self.stop_reason})

    def _fill(self, pending, inflight: InFlight | None, staged: InFlight | None = None,
              until: Callable[[], bool] | None = None) -> InFlight | None:
        """Ask the sampler ahead and submit the compiles (constraint violations and repeats are
        answered at once); with `until`, stop as soon as it holds with a config asked. Between
        asks, the next compiled config is staged for the relay (`_stage`) as soon as it can be."""
        # asked and not recorded: the first run counts from its trial on (first_run.py), so that its
        # trial is asked whatever the lookahead
        extra = ((1 if inflight is not None and inflight.trial is not None else 0) + (1 if staged is not None else 0)
                 + self.first_run.unrecorded())
        study = self.study
        study.budget_elsewhere = False
        while (self.queue.wants(len(pending) + extra, sampler_kind=study.sampler_kind, queued=study.queued)
               and study.asks < study.max_asks):
            if self.recorder.tried() + len(pending) + extra >= study.n_valid:
                break
            if until is not None and pending and until():
                break
            if until is None and self._child_wants(pending, inflight, len(pending) + extra):
                break
            if not self.ctx.retry(lambda: self._ask_one(pending, inflight, staged), "asking for a config"):
                break
            if staged is None and until is None:
                staged = self._stage(pending, inflight, None)
                extra += 1 if staged is not None else 0
        return staged

    def _child_wants(self, pending, inflight: InFlight | None, asked: int) -> bool:
        """Whether `_fill` stops asking to serve the child, with AHEAD_BEFORE_SERVING configs asked
        and not yet recorded (`asked`): the child answered (the config staged for it, if any, runs
        now, and nothing is staged after it until the answer is read), or nothing is in it and a
        compiled config is pending. A lookahead of 16 asked in one go was half a second of asks on
        PostgreSQL, which left the child idle 0.3-0.7 s after its first runs on 2 x H100."""
        if asked < AHEAD_BEFORE_SERVING:
            return False
        if self.relay is not None and self.relay.waiting():
            return True
        return inflight is None and bool(pending) and self._compiled_index(pending) is not None

    def _ask_one(self, pending, inflight: InFlight | None, staged: InFlight | None = None) -> bool:
        """Ask for one config and settle it: recorded as invalid, told as a repeat or as in flight
        elsewhere, or claimed and appended to `pending` with its compile submitted. False when the
        trial budget has no room (or refused the trial its claim). Workers sharing a job ask side
        by side (on SQLite under the job's lock: RunContext.ask_section). Retried after an outage,
        it goes on with the trial it had asked."""
        ahead = [x for x in (inflight, staged) if x is not None]
        mine = len(pending) + sum(1 for x in ahead if x.trial is not None) + self.first_run.unrecorded()
        with self.ctx.ask_section():
            trial = self.study.ask(mine)
        if trial is None:
            return False
        admitted = True
        try:
            admitted = self._settle(trial, pending, ahead)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass   # finished already: told before an outage cut the answer off, or taken for an orphan
        self.study.settled(trial, in_flight=trial in [t for t, _, _ in pending])
        return admitted

    def _settle(self, trial, pending, ahead: list[InFlight]) -> bool:
        """`ahead`: the configs in the child or staged for it. False when the trial was to be measured
        and the budget refused its claim (it is given back)."""
        study = self.study
        config = study.suggest(trial)
        key = config_key(config)
        bad = study.space.violations(config, study.env)
        if bad:
            r = Result(trial.number, config, "invalid", error=CONSTRAINT_PREFIX + "; ".join(bad), counted=False)
            self._record(r, trial)
            return True
        busy = [c for _, c, _ in pending] + [x.config for x in ahead]
        # Another worker's trial stays RUNNING in the study until its result, stored before, is
        # told: read in this order (the configs in flight elsewhere, then the results), a config
        # another worker is measuring or has measured is one or the other. Two workers that
        # propose one config at once both store it (suggest) before reading the other's: at least
        # one sees the other's (both may, and both step back: the config stays untried).
        elsewhere = study.running_elsewhere(trial.number)
        if self.ctx.shared:
            self.recorder.sync()
        if key in self.recorder.seen:
            study.tell_repeat(trial, self.recorder.seen[key], busy)
            return True
        study.repeats = 0
        if self.first_run.takes(config) and key not in elsewhere:   # the config the child has run or runs
            if not study.claim(trial, len(pending) + len(ahead)):
                study.give_back(trial, config)
                return False
            self.first_run.attach(trial)
            return True
        here = [(t, c) for t, c, _ in pending] + [(x.trial, x.config) for x in ahead if x.trial is not None]
        twin = next((t.number for t, c in here if config_key(c) == key), elsewhere.get(key))
        if twin is not None:
            study.tell_busy(trial, twin, busy)
            return True
        if not study.claim(trial, len(pending) + len(ahead)):
            study.give_back(trial, config)
            return False
        pending.append((trial, config, self.queue.submit(config)))
        return True

    def _dispatch(self, trial, config: dict[str, Any], task) -> InFlight:
        """Send a config to the child (after its compile) without waiting for the answer; a compile
        failure, or a child that cannot take it, is the trial's result at once."""
        res = self.queue.result(task)
        if res["status"] != "ok":
            return InFlight(trial, config, Result(trial.number, config, res["status"], error=res.get("error")))
        compiled = res.get("compiled")
        self.queue.remember(config, compiled)
        idle_since = self.measurement.last_answer      # the child's last answer, not followed by a relayed config
        try:
            self.relay.send(self._run_request(config, compiled))
        except ChildTimeout as exc:
            return InFlight(trial, config, Result(trial.number, config, "timeout", error=f"timeout: {exc}"))
        except ChildCrashed as exc:
            return InFlight(trial, config, Result(trial.number, config, "runtime-error",
                                                  error=f"the GPU process died: {exc}"))
        if idle_since is not None:
            gap = time.monotonic() - idle_since
            if gap > CHILD_GAP_NOTED_S:
                tl = self.ctx.timeline
                tl.note("child_gaps", at=tl.since_start() - gap, s=gap)
        return InFlight(trial, config)

    def _run_request(self, config: dict[str, Any], compiled) -> dict[str, Any]:
        """The child's request to run and measure `config`. Should its outputs become the child's
        reference (it has none yet), they are saved for the other workers of the job on this host
        only if the config is one they may trust: a known-good one, or any in a job that has none
        (a worker that joined a job runs random configs first, and the claimer's reference is
        not always saved by then: a wrong first config of the joiner must not become everyone's)."""
        share = (not self.ctx.shared or not self._known_good_keys
                 or config_key(config) in self._known_good_keys)
        return {"op": "run", "config": config, "compiled": compiled, "measure": True, "share_reference": share}

    def _dispatch_ready(self, pending) -> InFlight | None:
        """The next config, if a compile is done: sent to the child before the parent records the
        previous result, so the child measures while the parent writes to the database."""
        i = self._compiled_index(pending)
        if i is None:
            return None
        item = pending[i]
        del pending[i]
        return self._dispatch(*item)

    def _compiled_index(self, pending, ok_only: bool = False) -> int | None:
        """Where in `pending` the next config to send is: the first whose compile is done (`ok_only`:
        and succeeded), so that a slow compile (some configs take seconds) does not hold up the
        ones asked after it — of those that may go now (`_eligible`)."""
        for i in self._eligible(pending):
            task = pending[i][2]
            if task is not None and self.queue.done(task) and (
                    not ok_only or (task.outcome or task.future.result()).get("status") == "ok"):
                return i
        return None

    def _record_failed_compiles(self, pending) -> None:
        """Record the configs whose compile failed (an error, or too big for the device) at once:
        they need no child, and the relay stages compiled configs past them — left in `pending`,
        they would hold lookahead places until the child ran out of work."""
        if not self._any_order(pending):
            return
        for item in [x for x in pending if x[2] is not None and self.queue.done(x[2])]:
            if (item[2].outcome or item[2].future.result()).get("status") == "ok":
                continue
            pending.remove(item)
            self._record(self._dispatch(*item).result, item[0])

    def _eligible(self, pending) -> list[int]:
        """The positions in `pending` that may go to the child now: any (`_any_order`), else only the
        known-good configs — whichever of them compiles first, since any of them may make the
        reference (the first of the list, with the largest tile, is often the slowest to compile: on
        2 x H100 the claimer's first run waited 0.1-0.3 s for it while others were compiled)."""
        if self._any_order(pending):
            return list(range(len(pending)))
        return [i for i, (_, config, _) in enumerate(pending) if config_key(config) in self._known_good_keys]

    def _any_order(self, pending) -> bool:
        """Whether the pending configs may go to the child in any order (the first compiled first):
        once the child has its reference outputs (or the job checks none), or while none of them is
        a known-good config. Until then only the known-good configs may go (`_eligible`), so that
        one of them makes the reference. A worker joining a job asks random configs only (the
        claimer took the known-good ones): holding its child for the first of them, however long
        that one compiles, gains no trust (on 2 x H100 at 21:55 a joiner's first run went out at
        1.33 s, its first config compiling while others were done)."""
        if self.measurement.has_reference or not self.ctx.spec.check.outputs:
            return True
        return not any(config_key(config) in self._known_good_keys for _, config, _ in pending)

    def _next_compiled(self, pending) -> tuple[Any, dict[str, Any], Any]:
        """The next config to send when the child is idle, taken out of `pending`: the first compiled
        (`_compiled_index`), else the first to finish compiling, waited for."""
        i = self._compiled_index(pending)
        while i is None and self._round_while_compiling(pending):
            i = self._compiled_index(pending)
        if i is None:
            eligible = [pending[j][2] for j in self._eligible(pending)]
            futures = [t.future for t in eligible if t is not None and t.future is not None and not t.lost()]
            if futures:
                tl = self.ctx.timeline
                t0 = tl.since_start()
                with tl.phase("compile_wait"):
                    cf.wait(futures, timeout=self.ctx.spec.measure.compile_timeout_s,
                            return_when=cf.FIRST_COMPLETED)
                tl.note("compile_waits", at=t0, s=tl.since_start() - t0, compiling=len(futures),
                        oldest=max(t0 - (t.submitted_s or t0) for _, _, t in pending if t is not None))
                i = self._compiled_index(pending)
        if i is None:        # none done: the first that may go, waited for (CompileQueue.result: its timeout)
            i = (self._eligible(pending) or [0])[0]
        item = pending[i]
        del pending[i]
        return item

    def _round_while_compiling(self, pending) -> bool:
        """The end of the trial budget, the child idle, and what is left to run here still compiling,
        each for STRAGGLER_S or more (some configs take 1-3 s to compile; on 2 x H100 the claimer's
        child waited 0.1-0.3 s for one at the end of every shared job): the child measures a round
        of the finalists as they stand meanwhile (tuner/final_rounds.py), a round the end needs
        anyway unless a trial still to come enters the top few. False when it measured none (the
        budget has room: the search asks more configs instead)."""
        eligible = [pending[j][2] for j in self._eligible(pending)]
        now = self.ctx.timeline.since_start()
        if (not eligible
                or any(t is None or self.queue.done(t) or now - (t.submitted_s or now) < STRAGGLER_S
                       for t in eligible)):
            return False
        if self.ctx.retry(lambda: self.study.budget_has_room(len(pending)), "reading the trial budget"):
            return False
        return self.final_rounds.round_while_waiting()

    def _stage(self, pending, inflight: InFlight | None, staged: InFlight | None) -> InFlight | None:
        """Hand the next config to the relay (tuner/relay.py), which sends it the moment the child
        answers the one it runs: when one is compiled and will be run whatever that answer says
        (`_surely_continues`). The staged config, or None."""
        if staged is not None or inflight is None or inflight.result is not None or not pending:
            return staged
        i = self._compiled_index(pending, ok_only=True)
        if i is None or not self._surely_continues():
            return None
        trial, config, task = pending[i]
        compiled = self.queue.result(task).get("compiled")
        request = self._run_request(config, compiled)
        if not self.relay.stage(request):
            return None      # the child has answered already: the loop sends it
        self.queue.remember(config, compiled)
        del pending[i]
        return InFlight(trial, config, task=task, request=request)

    def _collect(self, inflight: InFlight, staged: InFlight | None = None,
                 pending=None) -> tuple[Result, InFlight | None, bool]:
        """The result of the config in the child; the config staged after it (`staged`, or one
        staged while waiting: its compile finished meanwhile) and whether the relay sent it."""
        if inflight.result is not None:
            return inflight.result, staged, False
        with self.ctx.timeline.phase("child_wait_run"):
            while True:
                poll = staged is None and bool(pending) and self._surely_continues()
                answer = self.relay.answer(timeout=STAGE_POLL_S if poll else None)
                if answer is not None:
                    break
                staged = self._stage(pending, inflight, staged)
        tl = self.ctx.timeline
        tl.count("answered")
        if answer.sent_next:
            tl.count("relayed")
        status, samples, error = self.measurement.outcome(answer.resp, answer.error)
        number = inflight.trial.number if inflight.trial is not None else -1     # a first run before its trial
        return (Result(number, inflight.config, status, samples if status == "ok" else [], error),
                staged, answer.sent_next and staged is not None)

    # --- recording -----------------------------------------------------------------------------

    def _record(self, r: Result, trial: optuna.trial.Trial | None) -> None:
        with self.ctx.timeline.phase("record"):
            if not self.ctx.retry(lambda: self._store(r, trial), f"recording trial {r.number}"):
                return
            self.recorder.note(r)
            self.ctx.retry(self.recorder.count_done, "counting the recorded trials")
            # Optuna's tell and the job's progress are written behind: the search goes on meanwhile
            elapsed, progress = self._elapsed(), self._progress()
            self.write_behind.submit(lambda: self._tell(r, trial), f"telling Optuna trial {r.number}")
            self.write_behind.submit(lambda: self._update_job(elapsed, progress), "updating the job's progress")
            best = self.recorder.best
            self.ctx.on_event("trial", {"number": r.number, "config": r.config, "status": r.status,
                                        "median_ms": r.median_ms, "error": r.error,
                                        "best_ms": best.median_ms if best else None,
                                        "best_config": best.config if best else None,
                                        "done": self.recorder.done, "total": self.study.trials_total,
                                        "elapsed_s": self._elapsed()})

    def _store(self, r: Result, trial: optuna.trial.Trial | None) -> bool:
        """Write the result to tuning_trials (with the job's trials_done), once, so that a retry after
        an outage goes on where the last attempt stopped (`_tell` tells Optuna after). A sharing
        worker stores it only while its trial is RUNNING, in the same transaction
        (Recorder.store): False when another worker failed the trial first (this worker's lease had
        expired and the job was re-claimed, or its heartbeats stopped for study.TRIAL_GRACE_S): its
        config was re-queued, and recording the result too would count it twice."""
        if r.stored:
            return True
        guard = trial._trial_id if trial is not None and self.ctx.shared else None
        if self.recorder.store(r, while_running=guard):
            r.stored = True
            return True
        self.study.live.discard(trial._trial_id)
        if self.recorder.recorded_here(r.number):
            r.stored = r.told = True      # our store went through (an outage cut off its answer); finished since
            return True
        log.warning("job %d: trial %d was failed by another worker while this one ran it (this worker was taken "
                    "for dead); its result is dropped", self.ctx.job_id, r.number)
        return False

    def _tell(self, r: Result, trial: optuna.trial.Trial | None) -> None:
        """The stored result, told to Optuna (tuner/write_behind.py; outside the job's lock: the result
        is stored, so no worker re-queues its config any more — a stale trial's config is re-queued
        only without a result, tuner/study.py requeue — and a trial that is recorded and still
        RUNNING counts once against the budget)."""
        if trial is not None and not r.told:
            self.study.tell(trial, r)
            r.told = True

    def _update_job(self, elapsed: float, progress: float) -> None:
        self.study.save_elapsed(elapsed)
        self.recorder.update_job(trials_total=self.study.trials_total, progress=progress)

    def _elapsed(self) -> float:
        return self.study.elapsed_before + (time.monotonic() - self.t0)

    def _progress(self) -> float:
        b = self.ctx.spec.budget
        parts = []
        if self.study.trials_total:
            parts.append(self.recorder.done / self.study.trials_total)
        if b.seconds:
            parts.append(self._elapsed() / b.seconds)
        return min(0.99, max(parts) if parts else 0.0)

    # --- when to stop --------------------------------------------------------------------------

    def _check_stop(self) -> str | None:
        state = self.recorder.job_state()
        if state != "running":
            return f"job is {state}"
        if self.ctx.should_stop():
            return "asked to stop"
        b, rec = self.ctx.spec.budget, self.recorder
        if b.trials is not None and rec.done >= b.trials:
            return "trial budget spent"
        if b.seconds is not None and self._elapsed() >= b.seconds:
            return "time budget spent"
        if b.patience is not None and rec.best is not None and rec.since_improvement >= b.patience:
            return f"no improvement in {b.patience} trials"
        if rec.tried() >= self.study.n_valid:
            return "search space exhausted"
        return None

    def _would_continue(self, r: Result) -> bool:
        """Whether the search certainly goes on after recording `r` (then the next config may be sent
        first): the trial budget, the time budget and patience, as `_check_stop` will see them."""
        b, rec = self.ctx.spec.budget, self.recorder
        if self.ctx.should_stop():
            return False
        if b.trials is not None and rec.done + (1 if r.counted else 0) >= b.trials:
            return False
        if b.seconds is not None and self._elapsed() >= b.seconds:
            return False
        if b.patience is not None and r.counted:
            m = r.median_ms
            improved = m is not None and (rec.best is None or m < rec.best.median_ms)
            best_after = rec.best is not None or m is not None
            if not improved and best_after and rec.since_improvement + 1 >= b.patience:
                return False
        return True

    def _surely_continues(self) -> bool:
        """Whether the search goes on after the config in the child whatever its result (then the
        next may be sent before that result is read): `_would_continue` for a result that counts
        and does not improve, with the time budget a whole trial's timeout away."""
        b, rec = self.ctx.spec.budget, self.recorder
        if self.ctx.should_stop():
            return False
        if b.trials is not None and rec.done + 1 >= b.trials:
            return False
        if b.seconds is not None and self._elapsed() + self.ctx.spec.measure.timeout_s >= b.seconds:
            return False
        if b.patience is not None and rec.since_improvement + 1 >= b.patience:
            return False
        return True

    def _interrupted(self) -> bool:
        """The search stopped from outside (cancelled, finished elsewhere, should_stop)."""
        reason = self.stop_reason or ""
        return reason == "asked to stop" or reason.startswith("job is ")

    # --- the end -------------------------------------------------------------------------------

    def finalize(self, *, finisher: bool = True) -> None:
        """Re-measure the finalists in rounds (tuner/final_rounds.py) and store the winner.
        `finisher`: this run ended the search. Otherwise its share of the trial budget is spent while
        other workers run the last trials: it measures rounds meanwhile, and stores the winner only
        if it ends up with enough rounds of the final finalists."""
        ctx, spec, m = self.ctx, self.ctx.spec, self.measurement
        t_finalize = time.monotonic()
        seen = self.recorder.seen
        if finisher and not any(r.median_ms is not None for r in seen.values()):
            counts = collections.Counter(r.status for r in seen.values())
            detail = ", ".join(f"{n} {s}" for s, n in counts.most_common()) or "no trials"
            first_err = next((r.error for r in sorted(seen.values(), key=lambda r: r.number) if r.error), None)
            raise RuntimeError(f"no config ran correctly ({detail})" + (f"; first error: {first_err}" if first_err else ""))
        if spec.measure.remeasure_top > 0:
            outcome = self.final_rounds.run(finisher=finisher)
            if outcome is None:
                self._share_done(t_finalize)
                return
            finalists, default, remeasured = outcome.finalists, outcome.default, outcome.remeasured
        elif finisher:
            (finalists, default), remeasured = self.final_rounds.finalists(), {}
        else:
            self._share_done(t_finalize)
            return

        def final_ms(r: Result) -> float:
            return remeasured.get(config_key(r.config), r.median_ms)

        # the default config is a legitimate candidate: if it wins the fair re-measurement, it stays
        winner = min(finalists, key=final_ms)
        best_ms = final_ms(winner)
        default_ms = final_ms(default) if default is not None and default.median_ms is not None else None
        if not ctx.retry(lambda: self.recorder.publish(winner, best_ms, default_ms, fingerprint=ctx.fingerprint,
                                                       kernel_name=ctx.kernel_name, gpu_model=m.gpu_model,
                                                       capability=m.capability), "storing the winner"):
            log.info("job %d was finished elsewhere (or cancelled) during the re-measurement; winner not stored",
                     ctx.job_id)
            self._share_done(t_finalize)
            return
        # after the winner is stored: a worker that lost the race to store it leaves the winner's numbers
        remeasured_ms = {config_key(r.config): remeasured.get(config_key(r.config)) for r in finalists}
        ctx.retry(lambda: self.study.study.set_user_attr("remeasured_ms", remeasured_ms), "saving the re-measurement")
        tl = ctx.timeline
        tl.add("finalize", time.monotonic() - t_finalize)
        tl.add("total", tl.since_start())
        self.timeline_data = tl.as_dict()
        log.info("job %d: winner %s %.4g ms; timeline:\n%s", ctx.job_id, winner.config, best_ms,
                 format_timeline(self.timeline_data, indent="  "))
        ctx.on_event("done", {"config": winner.config, "median_ms": best_ms, "default_ms": default_ms,
                              "number": winner.number, "remeasured": bool(remeasured),
                              "gpu_model": m.gpu_model, "reason": self.stop_reason,
                              "timeline": self.timeline_data})

    def _share_done(self, t_finalize: float) -> None:
        """This run's part of the job is over and another worker stores (or stored) the winner, or the
        job ended elsewhere: where this run's time went."""
        tl = self.ctx.timeline
        tl.add("finalize", time.monotonic() - t_finalize)
        tl.add("total", tl.since_start())
        self.timeline_data = tl.as_dict()
        log.info("job %d: this worker's share is done (the winner is stored by another worker); timeline:\n%s",
                 self.ctx.job_id, format_timeline(self.timeline_data, indent="  "))


def run_job(db_url: str, job_id: int, *, device: int = 0, interpret: bool = False, worker_id: str | None = None,
            should_stop: Callable[[], bool] | None = None, on_event: EventFn | None = None,
            reclaimed: bool = False, standby: Standby | None = None) -> None:
    """Run (or resume) job `job_id` stored in `db_url`; see the module doc. `reclaimed`: the job
    was claimed after its lease expired (db.repo.claims), so the RUNNING trials of its study are
    a dead worker's: they are failed at once and their configs re-queued. `standby`: a service
    worker's warm GPU child and compile pool (tuner/standby.py), used instead of starting new ones."""
    Tuner(db_url, job_id, device=device, interpret=interpret, worker_id=worker_id, should_stop=should_stop,
          on_event=on_event, reclaimed=reclaimed, standby=standby).run()
