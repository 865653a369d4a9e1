"""The study: a job's Optuna study (RDBStorage in the job's database, `job-<id>`) and the search space —
what to ask next, what is told back, and sharing the study with other workers.

Opening it resumes what earlier runs left (trials recorded but not told are told; RUNNING trials a
killed run left are failed and their configs re-queued) and, for a fresh study, enqueues known-good
configs first: the previous winner, the default config, the spec's list.

Workers sharing a job (service workers) ask for a trial when the trials recorded and in flight
anywhere leave room, and claim it before its config is measured (tuner/trial_claims.py), so the
trial budget is exact: a trial refused its claim is given back. Their in-flight trials carry Optuna
heartbeats, and a trial whose heartbeat stopped (its worker died) is failed and its config re-queued.
"""
from __future__ import annotations

import datetime
import logging
import math
import random
import threading
import time
import warnings
import zlib
from typing import Any, Callable

import optuna
import sqlalchemy as sa

from db import repo
from db.engine import install_sqlite_pragmas, normalize_url, sqlite_connect_args
from db.models import Job
from db.retry import is_unavailable
from jobspec.device import device_env
from jobspec.problem_key import canonical_key
from tuner import study_reads, trial_claims
from tuner.recording import Recorder
from tuner.results import Result
from tuner.run_context import RunContext
from tuner.samplers import FirstDrawsSampler, choose_kind, make_sampler, mark
from tuner.space import SearchSpace, compile_cost_hint, config_key

log = logging.getLogger("blocktune.tuner")

MAX_ENUMERATE = 200_000
MAX_REPEATS = 25          # proposals of known configs in a row before an untried one is handed over
# Optuna heartbeats of the trials a sharing worker has in flight, and how long a trial may go
# without one before another worker fails it (its worker died). Longer than a database outage a
# worker rides out, so that the trials of a worker that only lost the database stay its own.
TRIAL_HEARTBEAT_S = 5
TRIAL_GRACE_S = 60
# databases whose Optuna tables this process has seen made and checked: a later storage on one skips
# Optuna's table creation and schema check (a query per table and the version's, every job's
# start; a service worker opens a study per job)
_tables_checked: set[str] = set()


def optuna_storage(db_url: str, *, heartbeat: bool = False,
                   on_stale: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
                   ) -> optuna.storages.RDBStorage:
    """Optuna's RDBStorage on our database (`optuna-dashboard <db_url>` opens the studies).
    `heartbeat`: trials carry heartbeats (TRIAL_HEARTBEAT_S, TRIAL_GRACE_S) and
    `optuna.storages.fail_stale_trials` fails those whose heartbeat stopped, calling `on_stale`."""
    url = normalize_url(db_url)
    kwargs: dict[str, Any] = {}
    beat: dict[str, Any] = {}
    if heartbeat:
        beat = dict(heartbeat_interval=TRIAL_HEARTBEAT_S, grace_period=TRIAL_GRACE_S,
                    heartbeat_stale_trial_callback=on_stale)
    if url.startswith("sqlite"):
        kwargs["connect_args"] = sqlite_connect_args()
    else:
        kwargs["pool_pre_ping"] = True
    checked = url in _tables_checked
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, skip_table_creation=checked,
                                                     skip_compatibility_check=checked, **beat)
            _tables_checked.add(url)
            if url.startswith("sqlite"):
                # the pragmas our own engine uses (db.engine): WAL with synchronous=NORMAL, i.e. no
                # fsync per commit — Optuna commits several times per trial (each suggest, each attr)
                install_sqlite_pragmas(storage.engine)
                storage.engine.dispose()      # the connections opened so far had none
            return storage
        except (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
            if checked:
                # not the database whose tables were checked (a new one at the same URL): check again
                _tables_checked.discard(url)
                checked = False
                continue
            # two workers creating Optuna's tables at once: one wins, the other retries and finds them
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def prepare_storage(db_url: str) -> None:
    """Optuna's tables made (where missing) and checked in `db_url`, once for this process: a
    service worker does it before it registers, so that its first job's study opens as fast as the
    next ones'. A failure is left for the job's own open to meet."""
    try:
        optuna_storage(db_url).engine.dispose()
    except Exception as exc:  # noqa: BLE001 - the database may be down at start: the job retries
        log.info("Optuna's tables not prepared (%s): the first job's study open does it", exc)


class JobStudy:
    def __init__(self, ctx: RunContext, recorder: Recorder, *, reclaimed: bool = False):
        self.ctx = ctx
        self.recorder = recorder
        # the job was claimed after its lease expired: the RUNNING trials of its study belong to
        # workers that died (a live worker on the job would have renewed the lease)
        self.reclaimed = reclaimed
        self.storage: optuna.storages.RDBStorage | None = None
        self.study: optuna.Study | None = None
        self.study_id = 0                            # the study's id in Optuna's tables (tuner/study_reads.py)
        self.joined = False                          # another worker claimed the job: this one joined it
        self.space: SearchSpace | None = None
        self.env: dict[str, Any] = {}                # what constraints see: sizes, scalars, constants, device
        self.valid: list[dict[str, Any]] | None = None   # the valid configs, when the space is small enough
        self.n_valid = 0
        self.trials_total: int | None = None
        self.sampler_kind = ""
        self.elapsed_before = 0.0                    # this worker's time in earlier runs of the job
        self.default_config: dict[str, Any] | None = None
        self._known_good: list[tuple[str, dict[str, Any]]] | None = None
        self._draws: list[dict[str, Any]] = []       # a joining worker's first configs (first_draws)
        self.queued = 0                              # enqueued trials not yet asked (auto lookahead)
        self.live: set[int] = set()                  # ids of the trials this run asked and has not told
        self.unclassified = None                     # a trial asked whose config is not settled yet
        self._waiting: int | None = None             # trials in the study's queue, as the budget's count saw them
        self.budget_elsewhere = False                # no trial left to ask: the rest is in flight elsewhere
        self.asks = 0
        self.max_asks = 0
        self.repeats = 0                             # proposals of known configs in a row
        self._rng = random.Random(ctx.job_id)
        self._stale_checked = -math.inf
        self._beat_stop: threading.Event | None = None
        self._elapsed_saved = -math.inf

    # --- opening ---------------------------------------------------------------------------------

    def open(self, props: dict[str, Any], gpu_model: str) -> None:
        """Open (or create) the study and resume it: see the module doc. Retried whole after an
        outage (the last attempt's storage is let go)."""
        if self.storage is not None:
            try:
                self.storage.engine.dispose()
            except Exception:  # noqa: BLE001
                pass
        self._open(props)
        self._resume()
        self._enqueue_known_good(gpu_model)
        self.queued = len(self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))

    def _open(self, props: dict[str, Any]) -> None:
        ctx, spec = self.ctx, self.ctx.spec
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        # heartbeats are recorded by this run (start_heartbeats), not by study.optimize's thread
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        if self.space is None:
            self.space = SearchSpace.from_spec(spec)
        self.use_device(props)
        budget = spec.budget
        self.trials_total = min(budget.trials, self.n_valid) if budget.trials else None
        self.storage = optuna_storage(ctx.db_url, heartbeat=ctx.shared, on_stale=self._on_stale_trial)
        try:
            existing = optuna.load_study(study_name=ctx.study_name, storage=self.storage)
            kind = existing.user_attrs.get("sampler_kind")
        except KeyError:
            existing, kind = None, None
        if kind is None:
            kind = choose_kind(spec.sampler, self.n_valid, budget.trials)
        self.sampler_kind = kind
        startup = max(4, min(10, (budget.trials or 50) // 5))
        self.joined = shared = self._claimed_by_another()
        seed = self._joining_seed() if shared else spec.seed
        sampler = make_sampler(kind, seed=seed, constant_liar=(spec.lookahead or 2) > 1 or shared,
                               n_startup_trials=startup)
        if shared and self._draws and kind in ("random", "tpe"):
            sampler = FirstDrawsSampler(sampler, [self.space.encode(c) for c in self._draws],
                                        self.space.distributions())
        self.study = optuna.create_study(study_name=ctx.study_name, storage=self.storage, sampler=sampler,
                                         direction="minimize", load_if_exists=True)
        self.study_id = self.storage.get_study_id_from_name(ctx.study_name)
        if existing is None:
            self.study.set_user_attr("sampler_kind", kind)
            self.study.set_user_attr("job_id", ctx.job_id)
            self.study.set_user_attr("kernel", ctx.kernel_name)
            self.study.set_user_attr("fingerprint", ctx.fingerprint)
            self.study.set_user_attr("problem_key", canonical_key(spec.problem_key()))
        self.elapsed_before = float(self.study.user_attrs.get(f"elapsed_s:{ctx.run_name}", 0.0))

    def use_device(self, props: dict[str, Any]) -> None:
        """The device the constraints see (again, when the child's differs from the parent's)."""
        self.env = self._constraint_env(props)
        if self.space.size <= MAX_ENUMERATE:
            self.valid = self.space.valid_configs(self.env)
            self.n_valid = len(self.valid)
        else:
            self.valid = None
            self.n_valid = self.space.size

    def _claimed_by_another(self) -> bool:
        ctx = self.ctx
        with ctx.Session() as s:
            job = s.get(Job, ctx.job_id)
            return bool(job and job.claimed_by and ctx.worker_id and job.claimed_by != ctx.worker_id)

    def _resume(self) -> None:
        """Results already recorded (a resumed or shared job) and trials a killed run left behind
        (failed under the job's lock; the rest is read and told without it, so that a worker
        joining a job does not hold up the others' asks while it opens the study)."""
        ctx = self.ctx
        self.recorder.sync()
        seen = self.recorder.seen
        recorded = {r.number for r in seen.values()}
        by_number = {r.number: r for r in seen.values()}
        orphans = []
        for ft in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if ft.number in recorded:
                # killed between recording the result and telling Optuna: tell it now
                r = by_number[ft.number]
                trial = optuna.trial.Trial(self.study, ft._trial_id)
                try:
                    with warnings.catch_warnings():   # the killed run may have set it already
                        warnings.simplefilter("ignore", UserWarning)
                        mark(trial, r.median_ms is not None)
                    self.study.tell(trial, r.median_ms if r.median_ms is not None else math.inf)
                except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
                    pass   # the worker sharing this job told Optuna between our read and our tell
                continue
            # left RUNNING by a killed run — or still being run by another worker sharing the study:
            # only this worker's own trials (an earlier run under the same name) and trials older
            # than any config can take are orphans
            owner = ft.user_attrs.get("worker")
            started = ft.datetime_start or datetime.datetime.now()
            age = (datetime.datetime.now() - started).total_seconds()
            # a trial without an owner was killed between ask() and its first attribute (a
            # millisecond window): an orphan for a local run, or once it is a minute old
            orphan = (self.reclaimed or owner == ctx.run_name or age >= self._stale_after_s()
                      or (owner is None and (not ctx.shared or age >= 60.0)))
            if orphan:
                orphans.append(ft)
        if not orphans:
            return     # a worker joining a live job: nothing to take the job's lock for
        # failing a trial and re-queueing its config changes what the budget counts: under the lock
        with ctx.section():
            self.recorder.sync()          # a result stored since the read above: not an orphan after all
            recorded = {r.number for r in self.recorder.seen.values()}
            for ft in orphans:
                if ft.number in recorded:
                    continue
                owner = ft.user_attrs.get("worker")
                try:
                    self.storage.set_trial_state_values(ft._trial_id, optuna.trial.TrialState.FAIL)
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue   # its worker finished it meanwhile
                if self.reclaimed and owner != ctx.run_name:
                    log.info("job %d: trial %d of %s failed (its worker's lease expired)", ctx.job_id, ft.number,
                             owner)
                self.requeue(ft.user_attrs.get("config"), ft.number)

    def _stale_after_s(self) -> float:
        m = self.ctx.spec.measure
        return m.compile_timeout_s + 3 * m.timeout_s + 60.0

    def known_good(self, gpu_model: str) -> list[tuple[str, dict[str, Any]]]:
        """The configs a fresh study asks first, in order, complete and without repeats: the previous
        winner, the default config, the spec's list. Read once (the engine compiles the first of
        them before the study is open)."""
        if self._known_good is not None:
            return self._known_good
        ctx, spec = self.ctx, self.ctx.spec
        if self.space is None:
            self.space = SearchSpace.from_spec(spec)
        candidates: list[tuple[str, dict]] = []
        with ctx.Session() as s:
            prev = repo.get_best_config(s, kernel_fingerprint=ctx.fingerprint,
                                        problem_key=canonical_key(spec.problem_key()), gpu_model=gpu_model)
            if prev is not None:
                candidates.append(("previous-winner", dict(prev.config)))
        default = self._default_config()
        if default is not None:
            candidates.append(("default", default))
        candidates += [("known-good", c) for c in spec.configs]
        out, done = [], set()
        for label, partial in candidates:
            cfg = self.space.complete(partial)
            if cfg is None or config_key(cfg) in done:
                continue
            done.add(config_key(cfg))
            out.append((label, cfg))
        self._known_good = out
        return out

    def first_configs(self, props: dict[str, Any], gpu_model: str, n: int) -> list[dict[str, Any]]:
        """The first `n` known-good configs that fit the device: what a fresh study's first asks
        return, known before the study is open."""
        env = self._constraint_env(props)
        return [c for _, c in self.known_good(gpu_model) if not self.space.violations(c, env)][:n]

    def first_draws(self, props: dict[str, Any], gpu_model: str, n: int) -> list[dict[str, Any]]:
        """A worker joining a fresh job: its first configs, drawn now, before its study opens, so that
        their compiles start at once (they went out only after the study opened and the first asks,
        0.25-0.45 s into the join on 2 x H100, against 0.03 s for the worker that claimed the job
        with its known-good configs). Uniform over the valid configs that are not known-good (the
        claimer runs those), as many as the joining worker asks at first — none for brute force,
        which has an order of its own; the sampler hands them to the first new trials
        (samplers.FirstDrawsSampler), the proposals a random start would make."""
        spec = self.ctx.spec
        if self.space is None:
            self.space = SearchSpace.from_spec(spec)
        if self.space.size > MAX_ENUMERATE:
            return []
        valid = self.space.valid_configs(self._constraint_env(props))
        kind = choose_kind(spec.sampler, len(valid), spec.budget.trials)
        if kind == "tpe" and spec.lookahead is None:
            n = min(n, 2)              # TPE asks two ahead (compile_queue.wants)
        elif kind not in ("random", "tpe"):
            return []
        taken = {config_key(c) for _, c in self.known_good(gpu_model)}
        fresh = [c for c in valid if config_key(c) not in taken]
        # cheapest to compile first: the sampler hands them out, and the pool compiles them, in this
        # order (a uniform sample either way), so that the child's first configs come back soonest
        self._draws = sorted(random.Random(self._joining_seed()).sample(fresh, min(n, len(fresh))),
                             key=compile_cost_hint)
        return list(self._draws)

    def _joining_seed(self) -> int:
        """A joining worker's seed: it must not replay the claimer's random start-up proposals."""
        spec = self.ctx.spec
        return (spec.seed or 0) + 1 + zlib.crc32(str(self.ctx.worker_id).encode()) % 100_003

    def _constraint_env(self, props: dict[str, Any]) -> dict[str, Any]:
        spec = self.ctx.spec
        return {**spec.scalar_env(), **spec.constants, **device_env(props)}

    def _enqueue_known_good(self, gpu_model: str) -> None:
        """The known-good configs, first in the study's queue: enqueued once, into a new study, by
        the worker that claimed the job (a worker joining it never does: two enqueueing at once
        would queue them twice, and Optuna's skip_if_exists reads every trial per enqueue)."""
        self.default_config = self._default_config()
        if self.joined:
            return
        trials = self.study.get_trials(deepcopy=False)
        # a fresh job's study may hold a joining worker's first trials already: the queue is still ours
        if (trials and not self.ctx.fresh) or any("known_good" in t.user_attrs for t in trials):
            return
        for label, cfg in self.known_good(gpu_model):
            self.study.enqueue_trial(self.space.encode(cfg), user_attrs={"known_good": label})

    def _default_config(self) -> dict[str, Any] | None:
        spec = self.ctx.spec
        partial = spec.default_config or (spec.configs[0] if spec.configs else None)
        return self.space.complete(partial) if partial is not None else None

    # --- trials that lost their worker -------------------------------------------------------------

    def requeue(self, config: dict[str, Any] | None, number: int) -> None:
        """Put the config of a trial failed before its result (a stop, a dead worker) back in the
        queue, unless it has a result or is queued already. (Optuna's skip_if_exists would always
        skip it: the failed trial itself has these params.) The results are read after the trial
        was failed: the trial's own result, if its worker stored it first (a worker stores only
        while its trial is RUNNING, tuner/recording.py), is seen, and its config stays measured once."""
        if config is None:
            return
        self.recorder.sync()
        if config_key(config) in self.recorder.seen:
            return
        params = self.space.encode(config)
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            if t.system_attrs.get("fixed_params") == params:
                return
        self.study.enqueue_trial(params, user_attrs={"requeued_from": number})

    def _on_stale_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Optuna failed a trial whose heartbeat stopped (fail_stale_trials): its worker died."""
        log.warning("job %d: trial %d of %s failed: no heartbeat for %d s", self.ctx.job_id, trial.number,
                    trial.user_attrs.get("worker", "an unknown worker"), TRIAL_GRACE_S)
        self.requeue(trial.user_attrs.get("config"), trial.number)

    def start_heartbeats(self) -> None:
        """Optuna heartbeats for the trials this run has in flight (a sharing worker's): while
        they beat, no other worker takes them for a dead worker's."""
        if not self.ctx.shared or self._beat_stop is not None:
            return
        self._beat_stop = stop = threading.Event()
        job_id = self.ctx.job_id

        def beat() -> None:
            while not stop.wait(TRIAL_HEARTBEAT_S):
                for trial_id in list(self.live):
                    try:
                        self.storage.record_heartbeat(trial_id)
                    except Exception as exc:  # noqa: BLE001 - an outage: the next round tries again
                        log.debug("job %d: heartbeat of trial id %d failed: %s", job_id, trial_id, exc)
                        break

        threading.Thread(target=beat, name=f"trial-heartbeats-{job_id}", daemon=True).start()

    def _fail_stale(self) -> None:
        """Fail the trials whose heartbeat stopped (Optuna's fail_stale_trials; _on_stale_trial
        re-queues their configs). At most once per heartbeat period. Optuna fails a trial under its
        row lock, so one worker fails it and re-queues its config, and a result stored meanwhile
        (Recorder.store, under the same row lock) is seen by the re-queue, which then skips it."""
        now = time.monotonic()
        if now - self._stale_checked < TRIAL_HEARTBEAT_S:
            return
        self._stale_checked = now
        optuna.storages.fail_stale_trials(self.study)

    # --- asking ------------------------------------------------------------------------------------

    def budget_has_room(self, mine: int) -> bool:
        """Whether one more trial may fit the trial budget; `mine` are asked by this run and not yet
        recorded. A sharing worker counts the trials recorded and those in flight anywhere (RUNNING
        in the study and not recorded), its own included: a trial asked when this says yes may
        still be refused its claim (`claim`: another worker took the last place meanwhile)."""
        budget = self.ctx.spec.budget.trials
        if budget is None:
            return True
        if not self.ctx.shared:
            return self.recorder.done + mine < budget
        self._fail_stale()
        with self.ctx.Session() as s:
            running, self._waiting = study_reads.in_flight(s, self.study_id, self.ctx.job_id)
            self.recorder.done = repo.count_trials(s, self.ctx.job_id)
        if self.recorder.done + len(running) < budget:
            return True
        # nothing of this run in flight and the rest of the budget is in other workers' hands
        self.budget_elsewhere = mine == 0 and any(trial_id not in self.live for trial_id, _ in running)
        return False

    def ask(self, mine: int) -> optuna.trial.Trial | None:
        """The trial to settle next: the one an outage interrupted, else a new one; None when the
        trial budget has no room (`mine`: trials asked by this run and not recorded). Its config is
        suggested after (`suggest`); a sharing worker claims it before measuring it (`claim`)."""
        if self.unclassified is not None:
            return self.unclassified
        if not self.budget_has_room(mine):
            return None
        self.asks += 1
        with self.ctx.timeline.phase("ask"):
            trial = self._new_trial() if self._waiting == 0 else self.study.ask()
        self._waiting = None
        self.unclassified = trial
        self.live.add(trial._trial_id)
        if self.queued > 0:
            self.queued -= 1
        return trial

    def _new_trial(self) -> optuna.trial.Trial:
        """`Study.ask` for a study whose queue was just seen empty (`budget_has_room`): a new trial,
        without Optuna's pop of the queue, which syncs its cache — every unfinished trial of the
        study read again whole, in a shared study both workers' lookaheads — to find nothing.
        What Study.ask does besides, done the same: the sampler's per-ask read of the study
        dropped, the trial created through the study's (caching) storage."""
        study = self.study
        study._thread_local.cached_all_trials = None
        return optuna.trial.Trial(study, study._storage.create_new_trial(study._study_id))

    def claim(self, trial: optuna.trial.Trial, mine: int) -> bool:
        """Admit a trial about to be measured to the trial budget (tuner/trial_claims.py): always, for
        a run of its own or a budget of seconds only; for a sharing worker, while the trials
        recorded and claimed leave room. `mine`: this run's trials in flight, the one claimed not
        included (none, and refused: the rest of the budget is in flight elsewhere)."""
        budget = self.ctx.spec.budget.trials
        if budget is None or not self.ctx.shared:
            return True
        with self.ctx.timeline.phase("claim"), self.ctx.Session.begin() as s:
            admitted = trial_claims.claim(s, job_id=self.ctx.job_id, study_trial_id=trial._trial_id,
                                          number=trial.number, worker=self.ctx.run_name, budget=budget)
        if not admitted:
            self.ctx.timeline.count("claims_refused")
            self.budget_elsewhere = mine == 0
        return admitted

    def give_back(self, trial: optuna.trial.Trial, config: dict[str, Any]) -> None:
        """A trial refused its claim: failed (marked `over_budget`) and its config put back in the
        queue, like the trials of a run that stops (`fail_pending`): the place it was refused comes
        free again if a claimed trial fails before its result (its worker died or stopped)."""
        trial.set_user_attr("over_budget", True)
        try:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass      # told before an outage cut the answer off
        self.live.discard(trial._trial_id)
        self.requeue(config, trial.number)

    def settled(self, trial: optuna.trial.Trial, in_flight: bool) -> None:
        """The trial's config is settled: in flight here (compiling), or answered already."""
        self.unclassified = None
        if not in_flight:
            self.live.discard(trial._trial_id)

    def suggest(self, trial: optuna.trial.Trial) -> dict[str, Any]:
        """The trial's config, kept in the study with its worker (other workers sharing the job read
        both: running_elsewhere, and whose a RUNNING trial is when a run resumes)."""
        with self.ctx.timeline.phase("ask"):
            if self.ctx.shared:
                self.storage.record_heartbeat(trial._trial_id)
            trial.set_user_attr("worker", self.ctx.run_name)
            config = self.space.suggest(trial)
            trial.set_user_attr("config", config)
        return config

    def tell_repeat(self, trial: optuna.trial.Trial, prev: Result, busy: list[dict[str, Any]]) -> None:
        """The sampler proposed a config with a result: told that result again."""
        trial.set_user_attr("repeat_of", prev.number)
        mark(trial, prev.median_ms is not None)
        self.study.tell(trial, prev.median_ms if prev.median_ms is not None else math.inf)
        self._repeated(busy)

    def tell_busy(self, trial: optuna.trial.Trial, twin: int, busy: list[dict[str, Any]]) -> None:
        """The sampler proposed a config being measured (asked ahead here, or by another worker) as
        trial `twin`: a duplicate, not a failure — pruned, naming its twin (optuna-dashboard shows both)."""
        trial.set_user_attr("duplicate_of", twin)
        self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        self._repeated(busy)

    def _repeated(self, busy: list[dict[str, Any]]) -> None:
        self.repeats += 1
        if self.repeats >= MAX_REPEATS:
            self._enqueue_untried(busy)
            self.repeats = 0

    def _enqueue_untried(self, busy_configs) -> None:
        """The sampler only proposes configs it already knows (it has converged on a small space):
        hand it an untried valid config, so the budget buys new information."""
        if self.valid is None:
            return
        busy = set(self.recorder.seen) | {config_key(c) for c in busy_configs}
        untried = [c for c in self.valid if config_key(c) not in busy]
        if untried:
            cfg = untried[self._rng.randrange(len(untried))]
            self.study.enqueue_trial(self.space.encode(cfg), user_attrs={"untried_after_repeats": True})
            self.queued += 1

    def running_elsewhere(self, number: int) -> dict[str, int]:
        """Configs other runners of this job are evaluating right now (a shared study), with the
        number of the trial evaluating each."""
        if not self.ctx.shared:
            return {}
        with self.ctx.Session() as s:
            running = study_reads.running_configs(s, self.study_id)
        return {config_key(config): n for n, worker, config in running if n != number and worker != self.ctx.run_name}

    # --- telling -----------------------------------------------------------------------------------

    def tell(self, trial: optuna.trial.Trial, r: Result) -> None:
        """A result, told to Optuna: failures as infeasible, so constraint-aware TPE learns from them."""
        ok = r.status == "ok" and r.median_ms is not None
        try:
            mark(trial, ok)
            trial.set_user_attr("status", r.status)
            if r.error:
                trial.set_user_attr("error", r.error[:1000])
            self.study.tell(trial, r.median_ms if ok else math.inf)
        except optuna.exceptions.UpdateFinishedTrialError:
            # told before an outage cut the answer off, or (a local run) taken for an orphan
            log.info("trial %d was already finished in the study; its result is in tuning_trials", r.number)
        self.live.discard(trial._trial_id)

    def fail_pending(self, pending) -> None:
        """Trials asked but not run (a stop): failed in Optuna and put back in the queue."""
        for trial, config, _task in pending:
            try:
                try:
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                finally:
                    self.live.discard(trial._trial_id)
                self.requeue(config, trial.number)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass   # failed already by the worker that re-claimed the job, which re-queued it
            except Exception as exc:  # noqa: BLE001
                if is_unavailable(exc):   # a dead trial fails by its heartbeat, or when the job is re-claimed
                    log.warning("could not put trial %d back (the database is unavailable)", trial.number)
                else:
                    log.exception("could not put trial %d back", trial.number)

    def save_elapsed(self, elapsed: float, force: bool = False) -> None:
        """The run's elapsed time in the study (a resumed job's time budget goes on from it): at
        most once a second during the search (a commit each), and at its end."""
        now = time.monotonic()
        if force or now - self._elapsed_saved >= 1.0:
            self._elapsed_saved = now
            self.study.set_user_attr(f"elapsed_s:{self.ctx.run_name}", elapsed)

    def save_stop_reason(self, reason: str | None) -> None:
        """Why this run stopped, in the study: the dashboard explains a job that ended before its budget."""
        self.study.set_user_attr(f"stop_reason:{self.ctx.run_name}", reason)

    def close(self) -> None:
        if self._beat_stop is not None:
            self._beat_stop.set()
        if self.storage is not None:
            try:
                self.storage.remove_session()
                self.storage.engine.dispose()
            except Exception:  # noqa: BLE001
                pass
