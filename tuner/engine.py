"""The tuning engine: `run_job(db_url, job_id, ...)`.

One run of a job:
  1. loads the job and its spec, marks it running, launches the GPU child (it owns the CUDA context,
     or the CPU interpreter with interpret=True) and starts every compile worker — neither is
     waited for: the device's properties come from the driver in the parent (no CUDA context), so
     steps 2 and 3's first compiles overlap the child's start-up (torch, CUDA, the inputs);
  2. creates or resumes the job's Optuna study (RDBStorage on the same database, `job-<id>`),
     enqueueing known-good configs first (the previous winner, the default config, the spec's list);
  3. asks Optuna for configs ahead of the GPU (`lookahead`; by default every queued known-good
     config, up to 2 per compile worker, then 2): constraint violations and repeats are answered at
     once; the rest are compiled in the pool (to a cubin when a suitable ptxas is there), then run,
     checked against the reference and measured in the child; the next config goes to the child
     before the previous result is recorded. A hang kills the child (timeout), a fault restarts it
     (runtime-error); every trial is recorded (tuning_trials) and told to Optuna (failures as
     infeasible, so constraint-aware TPE learns from them);
  4. stops on the budget (evaluated trials and/or seconds), on patience (N evaluated trials without
     improvement), when the space is exhausted, when the job leaves `running` (cancelled), or when
     `should_stop()` is true (the job stays resumable);
  5. re-measures the best few configs and the default one in interleaved rounds, and stores the
     winner (jobs.best_config / best_time_ms and best_configs).
Where the time went (tuner/timeline.py) is logged at the end and sent with the "done" event.

Workers sharing a job (service workers, `worker_id` given) take the job's lock (db.job_lock) to
count the trials recorded and in flight (RUNNING in the study) before asking for one more, so the
trial budget is exact; they record a result under the same lock, only while its trial is still
theirs (RUNNING); their in-flight trials carry Optuna heartbeats, and a trial whose heartbeat
stopped (its worker died) is failed and its config re-queued. Every database call of a run is
retried through outages (db.retry): a measured result waits in memory until it is written.
"""
from __future__ import annotations

import collections
import contextlib
import datetime
import hashlib
import logging
import math
import random
import threading
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import optuna
import sqlalchemy as sa

from db import repo
from db.engine import install_sqlite_pragmas, make_engine, normalize_url, session_factory, sqlite_connect_args
from db.job_lock import job_lock
from db.retry import is_unavailable, retry
from db.models import Job, Trial, utcnow
from tuner.child import INTERPRETER_PROPS, child_main, device_env, split_config
from tuner.isolation import ChildCrashed, ChildError, ChildTimeout, CompilePool, CompilerCrashed, IsolatedChild
from tuner.samplers import choose_kind, make_sampler, mark
from tuner.space import SearchSpace, config_key
from tuner.spec import JobSpec
from tuner.timeline import Timeline, format_timeline

log = logging.getLogger("blocktune.tuner")

MAX_ENUMERATE = 200_000
MAX_REPEATS = 25          # proposals of known configs in a row before an untried one is handed over
CONSTRAINT_PREFIX = repo.UNCOUNTED_ERROR_PREFIX
# Optuna heartbeats of the trials a sharing worker has in flight, and how long a trial may go
# without one before another worker fails it (its worker died). Longer than a database outage a
# worker rides out, so that the trials of a worker that only lost the database stay its own.
TRIAL_HEARTBEAT_S = 5
TRIAL_GRACE_S = 60
EventFn = Callable[[str, dict[str, Any]], None]


def interpreter_device_properties() -> dict[str, Any]:
    """The "device" that interpret mode tunes for (best configs are stored under its name)."""
    return dict(INTERPRETER_PROPS)


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
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs, **beat)
            if url.startswith("sqlite"):
                # the pragmas our own engine uses (db.engine): WAL with synchronous=NORMAL, i.e. no
                # fsync per commit — Optuna commits several times per trial (each suggest, each attr)
                install_sqlite_pragmas(storage.engine)
                storage.engine.dispose()      # the connections opened so far had none
            return storage
        except sa.exc.SQLAlchemyError:
            # two workers creating Optuna's tables at once: one wins, the other retries and finds them
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


@dataclass
class Result:
    number: int
    config: dict[str, Any]
    status: str
    samples_ms: list[float] = field(default_factory=list)
    error: str | None = None
    counted: bool = True        # counts against the trial budget (constraint violations do not)
    # how far recording it got (a retry after a database outage goes on from there)
    stored: bool = field(default=False, repr=False, compare=False)
    told: bool = field(default=False, repr=False, compare=False)

    @property
    def median_ms(self) -> float | None:
        if self.status != "ok" or not self.samples_ms:
            return None
        s = sorted(self.samples_ms)
        n = len(s)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

    @property
    def spread(self) -> dict[str, float] | None:
        if not self.samples_ms:
            return None
        from tuner.measure import spread

        return spread(self.samples_ms)


class JobCancelled(Exception):
    pass


@dataclass
class _InFlight:
    """A config sent to the child (its answer not read yet), or one whose result is already known."""
    trial: Any
    config: dict[str, Any]
    result: Result | None = None


class Tuner:
    def __init__(self, db_url: str, job_id: int, *, device: int = 0, interpret: bool = False,
                 worker_id: str | None = None, should_stop: Callable[[], bool] | None = None,
                 on_event: EventFn | None = None, compile_workers: int | None = None, reclaimed: bool = False):
        self.db_url = normalize_url(db_url)
        self.job_id = job_id
        self.device = device
        self.interpret = interpret
        self.worker_id = worker_id
        self.should_stop = should_stop or (lambda: False)
        self.on_event = on_event or (lambda kind, data: None)
        self.compile_workers = compile_workers
        self.engine = make_engine(self.db_url)
        self.Session = session_factory(self.engine)
        self.child: IsolatedChild | None = None
        self.pool: CompilePool | None = None
        self.storage: optuna.storages.RDBStorage | None = None
        self.compiled: dict[str, Any] = {}
        self.seen: dict[str, Result] = {}
        self.best: Result | None = None
        self.since_improvement = 0
        self.stop_reason: str | None = None
        self._last_trial_id = 0
        self._rng = random.Random(job_id)
        self.run_name = worker_id or "local"
        self._maybe_shared = worker_id is not None   # only service workers share jobs
        # the job was claimed after its lease expired: the RUNNING trials of its study belong to
        # workers that died (a live worker on the job would have renewed the lease)
        self.reclaimed = reclaimed
        self._live: set[int] = set()                 # ids of the trials this run asked and has not told
        self._unclassified = None                    # a trial asked whose config is not settled yet
        self._lock_depth = 0
        self._budget_elsewhere = False               # no trial left to ask: the rest is in flight elsewhere
        self._stale_checked = -math.inf
        self._beat_stop = None
        self.props: dict[str, Any] | None = None
        self.ptxas: str | None = None
        self._cubin_disabled: str | None = None      # why cubins are off (the child refused one)
        self._child_ready = False
        self._recompile = False
        self._queued_left = 0                        # enqueued trials not yet asked (auto lookahead)
        self._elapsed_saved = -math.inf
        self.timeline = Timeline()
        self.timeline_data: dict[str, Any] | None = None
        self.has_reference = False
        self._first_sent: float | None = None
        self._last_answer: float | None = None

    # --- set-up -----------------------------------------------------------------------------

    def _load(self) -> bool:
        with self.Session.begin() as s:
            job = s.get(Job, self.job_id)
            if job is None:
                raise LookupError(f"no job {self.job_id}")
            if job.state in ("succeeded", "failed", "cancelled"):
                return False
            self.spec = JobSpec.model_validate(job.spec)
            self.kernel = job.kernel
            self.fingerprint, self.kernel_name = job.kernel.fingerprint, job.kernel.name
            self.study_name = job.study_name or f"job-{job.id}"
            # the job's identity beyond (database URL, id): a new database at the same path reuses
            # ids, and must not find the reference outputs an older job-1 left in its work directory
            self.job_identity = f"{job.created_at.isoformat() if job.created_at else ''}|{job.kernel.fingerprint}"
            now = utcnow()
            job.state = "running"
            job.study_name = self.study_name
            job.started_at = job.started_at or now
            job.updated_at = now
            if self.worker_id and not job.claimed_by:
                job.claimed_by = self.worker_id
        return True

    def _workdir(self) -> Path:
        import platformdirs

        tag = hashlib.sha256(f"{self.db_url}|{self.study_name}|{self.job_identity}".encode()).hexdigest()[:12]
        d = Path(platformdirs.user_cache_dir("blocktune", appauthor=False)) / "jobs" / f"{self.study_name}-{tag}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _launch_child(self) -> None:
        """Spawn the GPU child; it imports torch, creates the CUDA context and builds the inputs while
        the parent opens the study and the pool compiles (`_ensure_child` waits for it)."""
        self.workdir = self._workdir()
        init = {"spec": self.spec.to_json(), "interpret": self.interpret, "device": self.device,
                "workdir": str(self.workdir)}
        self.child = IsolatedChild(child_main, init, start_timeout=300)
        self.child.launch()

    def _ensure_child(self) -> None:
        """Wait for the child's ready message (once); adopt its device properties if the parent has
        none, and notice when they differ from the parent's (then compiles are redone)."""
        assert self.child is not None
        if self._child_ready:
            return
        tl = self.timeline
        with tl.phase("child_wait"):
            ready = self.child.wait_ready()
        self._child_ready = True
        self.has_reference = bool(ready.get("has_reference"))
        launched = getattr(self.child, "launched_at", None)
        if launched is not None and ready.get("ready_at"):
            tl.add("child_start", float(ready["ready_at"]) - launched)
            tl.mark_wall("child_ready", float(ready["ready_at"]))
            detail = {"spawn": round(max(0.0, float(ready.get("entered_at", launched)) - launched), 3)}
            detail.update(ready.get("startup") or {})
            tl.details["child_start_detail"] = detail
        props = ready["props"]
        if self.props is None:
            self._set_props(props)
        elif self._props_differ(props):
            log.warning("the GPU child sees device properties %s, the parent %s: compiling again for the child's",
                        {k: props.get(k) for k in ("name", "target", "max_shared_memory")},
                        {k: self.props.get(k) for k in ("name", "target", "max_shared_memory")})
            self._set_props(props)
            self.compiled.clear()
            self._recompile = True
            if getattr(self, "space", None) is not None:     # constraints see the child's device
                self.env = {**self.spec.scalar_env(), **self.spec.constants, **device_env(self.props)}
                if self.valid is not None:
                    self.valid = self.space.valid_configs(self.env)
                    self.n_valid = len(self.valid)

    def _props_differ(self, props: dict[str, Any]) -> bool:
        return any(props.get(k) != self.props.get(k) for k in ("name", "target", "max_shared_memory", "capability"))

    def _parent_props(self) -> dict[str, Any] | None:
        """The device's properties without the child: the interpreter's, or the driver's attributes
        (cuInit + cuDeviceGetAttribute: no CUDA context is created, so nothing is inherited by the
        spawned child and pool). None when the driver cannot say: then the child's are awaited."""
        if self.interpret:
            return dict(INTERPRETER_PROPS)
        try:
            from compiler.runtime import driver

            props = dict(driver.device_properties(self.device))
            props["target"] = driver.target_for_device(self.device)
            return props
        except Exception as exc:  # noqa: BLE001 - the child will tell
            log.info("device properties from the driver failed (%s); waiting for the GPU child's", exc)
            return None

    def _set_props(self, props: dict[str, Any]) -> None:
        self.props = props
        self.gpu_model = str(props["name"])
        self.capability = repo.capability_str(props["capability"])
        cap = props["capability"]
        self.target = None if self.interpret else (props.get("target") or f"sm_{cap[0]}{cap[1]}")
        self.ptxas = None
        if not self.interpret:
            from tuner.compile_step import select_ptxas

            if self._cubin_disabled is None:
                self.ptxas = select_ptxas(str(props.get("cuda_version") or ""))
        self.timeline.details["ptxas"] = self.ptxas

    def _record_gpu(self) -> None:
        if self.interpret:
            return
        with self.Session.begin() as s:
            repo.get_or_create_gpu(s, self.props)

    # --- the study --------------------------------------------------------------------------

    def _open_study(self) -> None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        # heartbeats are recorded by this engine (_beat), not by study.optimize's thread
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        self.space = SearchSpace.from_spec(self.spec)
        self.env = {**self.spec.scalar_env(), **self.spec.constants, **device_env(self.props)}
        if self.space.size <= MAX_ENUMERATE:
            self.valid = self.space.valid_configs(self.env)
            self.n_valid = len(self.valid)
        else:
            self.valid = None
            self.n_valid = self.space.size
        budget = self.spec.budget
        self.trials_total = min(budget.trials, self.n_valid) if budget.trials else None
        self.storage = optuna_storage(self.db_url, heartbeat=self._maybe_shared, on_stale=self._on_stale_trial)
        try:
            existing = optuna.load_study(study_name=self.study_name, storage=self.storage)
            kind = existing.user_attrs.get("sampler_kind")
        except KeyError:
            existing, kind = None, None
        if kind is None:
            kind = choose_kind(self.spec.sampler, self.n_valid, budget.trials)
        self.sampler_kind = kind
        startup = max(4, min(10, (budget.trials or 50) // 5))
        shared = self._shared_job()
        seed = self.spec.seed
        if shared:   # a joining worker must not replay the claimer's random start-up proposals
            seed = self.spec.seed + 1 + zlib.crc32(str(self.worker_id).encode()) % 100_003
        sampler = make_sampler(kind, seed=seed, constant_liar=(self.spec.lookahead or 2) > 1 or shared,
                               n_startup_trials=startup)
        self.study = optuna.create_study(study_name=self.study_name, storage=self.storage, sampler=sampler,
                                         direction="minimize", load_if_exists=True)
        if existing is None:
            self.study.set_user_attr("sampler_kind", kind)
            self.study.set_user_attr("job_id", self.job_id)
            self.study.set_user_attr("kernel", self.kernel_name)
            self.study.set_user_attr("fingerprint", self.fingerprint)
            self.study.set_user_attr("problem_key", repo.canonical_key(self.spec.problem_key()))
        self.elapsed_before = float(self.study.user_attrs.get(f"elapsed_s:{self.worker_id or 'local'}", 0.0))

    def _sync_seen(self) -> None:
        """Results recorded by earlier runs, or by other workers sharing this job's study."""
        with self.Session() as s:
            rows = s.scalars(sa.select(Trial).where(Trial.job_id == self.job_id, Trial.id > self._last_trial_id)
                             .order_by(Trial.id)).all()
            for t in rows:
                self._last_trial_id = max(self._last_trial_id, t.id)
                key = config_key(t.config)
                if key in self.seen and self.seen[key].number != t.number:
                    continue
                r = Result(t.number, dict(t.config), t.status, list(t.samples_ms or []), t.error,
                           counted=not (t.status == "invalid" and (t.error or "").startswith(CONSTRAINT_PREFIX)))
                self.seen[key] = r
                self._note_best(r)

    def _resume_state(self) -> None:
        """Results already recorded (a resumed or shared job) and trials a killed run left behind."""
        with self._shared_section():
            self._resume_state_locked()

    def _resume_state_locked(self) -> None:
        self._sync_seen()
        recorded = {r.number for r in self.seen.values()}
        states = (optuna.trial.TrialState.RUNNING,)
        by_number = {r.number: r for r in self.seen.values()}
        for ft in self.study.get_trials(deepcopy=False, states=states):
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
            orphan = (self.reclaimed or owner == self.run_name or age >= self._stale_after_s()
                      or (owner is None and (not self._maybe_shared or age >= 60.0)))
            if not orphan:
                continue
            try:
                self.storage.set_trial_state_values(ft._trial_id, optuna.trial.TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue   # its worker finished it meanwhile
            if self.reclaimed and owner != self.run_name:
                log.info("job %d: trial %d of %s failed (its worker's lease expired)", self.job_id, ft.number, owner)
            self._requeue(ft.user_attrs.get("config"), ft.number)

    def _requeue(self, config: dict[str, Any] | None, number: int) -> None:
        """Put the config of a trial failed before its result (a stop, a dead worker) back in the
        queue, unless it has a result or is queued already. (Optuna's skip_if_exists would always
        skip it: the failed trial itself has these params.)"""
        if config is None or config_key(config) in self.seen:
            return
        params = self.space.encode(config)
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            if t.system_attrs.get("fixed_params") == params:
                return
        self.study.enqueue_trial(params, user_attrs={"requeued_from": number})

    def _on_stale_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Optuna failed a trial whose heartbeat stopped (fail_stale_trials): its worker died."""
        log.warning("job %d: trial %d of %s failed: no heartbeat for %d s", self.job_id, trial.number,
                    trial.user_attrs.get("worker", "an unknown worker"), TRIAL_GRACE_S)
        self._sync_seen()
        self._requeue(trial.user_attrs.get("config"), trial.number)

    def _stale_after_s(self) -> float:
        m = self.spec.measure
        return m.compile_timeout_s + 3 * m.timeout_s + 60.0

    def _shared_job(self) -> bool:
        with self.Session() as s:
            job = s.get(Job, self.job_id)
            return bool(job and job.claimed_by and self.worker_id and job.claimed_by != self.worker_id)

    def _count_queued(self) -> None:
        waiting = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        self._queued_left = len(waiting)

    def _enqueue_known_good(self) -> None:
        if self.study.get_trials(deepcopy=False):
            self.default_config = self._default_config()
            return
        candidates: list[tuple[str, dict]] = []
        with self.Session() as s:
            prev = repo.get_best_config(s, kernel_fingerprint=self.fingerprint,
                                        problem_key=repo.canonical_key(self.spec.problem_key()),
                                        gpu_model=self.gpu_model)
            if prev is not None:
                candidates.append(("previous-winner", dict(prev.config)))
        self.default_config = self._default_config()
        if self.default_config is not None:
            candidates.append(("default", self.default_config))
        candidates += [("known-good", c) for c in self.spec.configs]
        done = set()
        for label, partial in candidates:
            cfg = self.space.complete(partial)
            if cfg is None or config_key(cfg) in done:
                continue
            done.add(config_key(cfg))
            # the study is empty and `done` removes duplicates: Optuna's skip_if_exists (a read of
            # every trial per enqueue) only matters when another worker may be enqueueing too
            self.study.enqueue_trial(self.space.encode(cfg), user_attrs={"known_good": label},
                                     skip_if_exists=self._maybe_shared)

    def _default_config(self) -> dict[str, Any] | None:
        partial = self.spec.default_config or (self.spec.configs[0] if self.spec.configs else None)
        return self.space.complete(partial) if partial is not None else None

    # --- bookkeeping ------------------------------------------------------------------------

    def _note_best(self, r: Result) -> bool:
        m = r.median_ms
        if m is None:
            return False
        if self.best is None or m < self.best.median_ms:
            self.best = r
            return True
        return False

    def counted_done(self) -> int:
        with self.Session() as s:
            return repo.count_trials(s, self.job_id)

    # --- sharing the job, riding out outages --------------------------------------------------

    def _retry(self, fn: Callable[[], Any], what: str) -> Any:
        """`fn()`, retried through database outages (db.retry) until it succeeds; gives up
        (DatabaseUnavailable) only when the run is asked to stop meanwhile. Inside the job's lock
        it is called once: the outage that failed it may have dropped the lock (a PostgreSQL
        restart ends the session holding it), so the retry around the whole locked section
        takes it again."""
        if self._lock_depth > 0 and self._maybe_shared:
            return fn()
        return retry(fn, f"job {self.job_id}: {what}", log=log, give_up=self.should_stop)

    @contextlib.contextmanager
    def _shared_section(self):
        """The job's lock (db.job_lock) when other workers may share the job; reentrant."""
        if not self._maybe_shared or self._lock_depth > 0:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        with job_lock(self.engine, self.job_id):
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1

    def _start_heartbeats(self) -> None:
        """Optuna heartbeats for the trials this run has in flight (a sharing worker's): while
        they beat, no other worker takes them for a dead worker's."""
        if not self._maybe_shared or self._beat_stop is not None:
            return
        self._beat_stop = stop = threading.Event()

        def beat() -> None:
            while not stop.wait(TRIAL_HEARTBEAT_S):
                for trial_id in list(self._live):
                    try:
                        self.storage.record_heartbeat(trial_id)
                    except Exception as exc:  # noqa: BLE001 - an outage: the next round tries again
                        log.debug("job %d: heartbeat of trial id %d failed: %s", self.job_id, trial_id, exc)
                        break

        threading.Thread(target=beat, name=f"trial-heartbeats-{self.job_id}", daemon=True).start()

    def _fail_stale(self) -> None:
        """Fail the trials whose heartbeat stopped (Optuna's fail_stale_trials; _on_stale_trial
        re-queues their configs). At most once per heartbeat period; under the job's lock."""
        now = time.monotonic()
        if now - self._stale_checked < TRIAL_HEARTBEAT_S:
            return
        self._stale_checked = now
        optuna.storages.fail_stale_trials(self.study)

    def _budget_has_room(self, mine: int) -> bool:
        """Whether one more trial fits the trial budget; `mine` are asked by this run and not yet
        recorded. A sharing worker counts, under the job's lock, the trials recorded and those in
        flight anywhere (RUNNING in the study and not recorded), its own included."""
        budget = self.spec.budget.trials
        if budget is None:
            return True
        if not self._maybe_shared:
            return self.done + mine < budget
        self._fail_stale()
        with self.Session() as s:
            recorded = set(s.scalars(sa.select(Trial.number).where(Trial.job_id == self.job_id)))
            self.done = repo.count_trials(s, self.job_id)
        running = [t for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
                   if t.number not in recorded]
        if self.done + len(running) < budget:
            return True
        # nothing of this run in flight and the rest of the budget is in other workers' hands
        self._budget_elsewhere = mine == 0 and any(t._trial_id not in self._live for t in running)
        return False

    def _elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.t0)

    def _record(self, r: Result, trial: optuna.trial.Trial | None) -> None:
        with self.timeline.phase("record"):
            self._record_untimed(r, trial)

    def _record_untimed(self, r: Result, trial: optuna.trial.Trial | None) -> None:
        if not self._retry(lambda: self._store(r, trial), f"recording trial {r.number}"):
            return
        self.seen[config_key(r.config)] = r
        improved = self._note_best(r)
        if r.counted:
            self.since_improvement = 0 if improved else self.since_improvement + 1
        self._retry(self._update_job, "updating the job's progress")
        self.on_event("trial", {"number": r.number, "config": r.config, "status": r.status,
                                "median_ms": r.median_ms, "error": r.error,
                                "best_ms": self.best.median_ms if self.best else None,
                                "best_config": self.best.config if self.best else None,
                                "done": self.done, "total": self.trials_total, "elapsed_s": self._elapsed()})

    def _store(self, r: Result, trial: optuna.trial.Trial | None) -> bool:
        """Write the result to tuning_trials (with the job's trials_done) and tell Optuna; each step
        once, so that a retry after an outage goes on where the last attempt stopped. False when
        another worker failed the trial meanwhile (this worker's lease had expired and the job was
        re-claimed, or its heartbeats stopped for TRIAL_GRACE_S): its config was re-queued, and
        recording the result too would count it twice."""
        with self._shared_section():
            if not r.stored and trial is not None and self._maybe_shared and not self._still_running(trial):
                self._live.discard(trial._trial_id)
                if self._recorded_here(r.number):
                    r.stored = r.told = True      # an outage cut off the answer to our own tell
                else:
                    log.warning("job %d: trial %d was failed by another worker while this one ran it (this "
                                "worker was taken for dead); its result is dropped", self.job_id, r.number)
                    return False
            if not r.stored:
                with self.Session.begin() as s:
                    repo.store_trial(s, job_id=self.job_id, number=r.number, config=r.config, status=r.status,
                                     samples_ms=r.samples_ms, median_ms=r.median_ms, spread=r.spread,
                                     error=r.error, worker=self.worker_id)
                r.stored = True
            if trial is not None and not r.told:
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
                r.told = True
                self._live.discard(trial._trial_id)
        return True

    def _still_running(self, trial: optuna.trial.Trial) -> bool:
        return self.storage.get_trial(trial._trial_id).state == optuna.trial.TrialState.RUNNING

    def _recorded_here(self, number: int) -> bool:
        with self.Session() as s:
            return s.scalar(sa.select(Trial.worker).where(Trial.job_id == self.job_id, Trial.number == number)) \
                == self.worker_id

    def _progress(self) -> float:
        b = self.spec.budget
        parts = []
        if self.trials_total:
            parts.append(self.done / self.trials_total)
        if b.seconds:
            parts.append(self._elapsed() / b.seconds)
        return min(0.99, max(parts) if parts else 0.0)

    def _save_elapsed(self, force: bool = False) -> None:
        """The run's elapsed time in the study (a resumed job's time budget goes on from it): at
        most once a second during the search (a commit each), and at its end."""
        now = time.monotonic()
        if force or now - self._elapsed_saved >= 1.0:
            self._elapsed_saved = now
            self.study.set_user_attr(f"elapsed_s:{self.worker_id or 'local'}", self._elapsed())

    def _update_job(self) -> None:
        self.done = self.counted_done()
        self._save_elapsed()
        # trials_done is not written here: store_trial keeps it equal to the recorded trials (a
        # count made here could be overtaken by another worker's record)
        values: dict[str, Any] = dict(trials_total=self.trials_total, progress=self._progress(), updated_at=utcnow())
        if self.best is not None:
            values.update(best_time_ms=self.best.median_ms, best_config=self.best.config)
        with self.Session.begin() as s:
            s.execute(sa.update(Job).where(Job.id == self.job_id, Job.state == "running").values(**values))

    def _check_stop(self) -> str | None:
        with self.Session() as s:
            state = repo.job_state(s, self.job_id)
        if state != "running":
            return f"job is {state}"
        if self.should_stop():
            return "asked to stop"
        b = self.spec.budget
        if b.trials is not None and self.done >= b.trials:
            return "trial budget spent"
        if b.seconds is not None and self._elapsed() >= b.seconds:
            return "time budget spent"
        if b.patience is not None and self.best is not None and self.since_improvement >= b.patience:
            return f"no improvement in {b.patience} trials"
        tried = sum(1 for r in self.seen.values() if r.counted)
        if tried >= self.n_valid:
            return "search space exhausted"
        return None

    # --- evaluation -------------------------------------------------------------------------

    def _submit_compile(self, config: dict[str, Any]):
        from tuner.compile_step import compile_config
        from tuner.data import signature, specialization

        constexprs, num_warps, num_stages = split_config(config)
        constexprs = {**self.spec.constants, **constexprs}
        env = self.spec.scalar_env()
        div16, one = specialization(self.spec, env)
        self.timeline.mark("first_compile")
        return self.pool.submit(compile_config, self.spec.kernel.source, self.spec.kernel.name, signature(self.spec, env),
                                constexprs, num_warps, num_stages, self.target, div16, one,
                                int(self.props.get("max_shared_memory") or 0) or None, self.interpret, self.ptxas)

    def _compile_result(self, task) -> dict[str, Any]:
        tl = self.timeline
        try:
            with tl.phase("compile_wait"):
                res = self.pool.result(task, timeout=self.spec.measure.compile_timeout_s)
        except CompilerCrashed as exc:
            return {"status": "compile-error", "error": str(exc)}
        except TimeoutError as exc:
            return {"status": "timeout", "error": f"timeout: {exc}"}
        tl.add("compile_cpu", res.get("compile_s") or 0.0)
        tl.add("ptxas", res.get("ptxas_s") or 0.0)
        if res.get("status") == "ok":
            tl.count("compiled")
            asm = getattr(res.get("compiled"), "asm", None) or {}
            if asm.get("cubin"):
                tl.count("cubins")
        if res.get("cubin_error"):
            tl.count("ptxas_failures")
            if tl.counts["ptxas_failures"] == 1:
                log.warning("ptxas (%s) failed on a config, its PTX is used instead: %s", self.ptxas,
                            str(res["cubin_error"])[:500])
        return res

    def _send(self, request: dict[str, Any]) -> None:
        self._ensure_child()
        self.child.send(request)
        if self._first_sent is None:
            self._first_sent = time.monotonic()

    def _receive(self, timeout: float) -> dict[str, Any]:
        with self.timeline.phase("child_wait_run"):
            resp = self.child.receive(timeout)
        self._last_answer = time.monotonic()
        self._note_child_timing(resp)
        return resp

    def _note_child_timing(self, resp: dict[str, Any]) -> None:
        timing = resp.get("timing") or {}
        tl = self.timeline
        tl.add("child_busy", timing.get("handle_s") or 0.0)
        tl.add("child_load", timing.get("load_s") or 0.0)
        tl.add("child_measure", timing.get("measure_s") or 0.0)
        if resp.get("cubin_error") and self._cubin_disabled is None:
            self._cubin_disabled = str(resp["cubin_error"])
            self.ptxas = None
            tl.details["ptxas"] = None
            log.warning("the driver refused a cubin (%s): shipping PTX from now on", self._cubin_disabled[:500])

    def _run_in_child(self, config: dict[str, Any], compiled, *, measure: bool = True) -> tuple[str, list[float], str | None]:
        try:
            self._send({"op": "run", "config": config, "compiled": compiled, "measure": measure})
        except ChildTimeout as exc:
            return "timeout", [], f"timeout: {exc}"
        except ChildCrashed as exc:
            return "runtime-error", [], f"the GPU process died: {exc}"
        return self._answer()

    def _answer(self) -> tuple[str, list[float], str | None]:
        try:
            resp = self._receive(self.spec.measure.timeout_s)
        except ChildTimeout as exc:
            return "timeout", [], f"timeout: {exc}"
        except ChildCrashed as exc:
            return "runtime-error", [], f"the GPU process died: {exc}"
        if resp.get("reference"):
            self.has_reference = True
        return resp["status"], list(resp.get("samples_ms") or []), resp.get("error")

    def _restore_reference(self) -> None:
        """A resumed job whose reference outputs are gone: re-run its first good config to get them."""
        if self.has_reference or not self.spec.check.outputs or self.spec.reference is not None:
            return
        ok = sorted((r for r in self.seen.values() if r.status == "ok"), key=lambda r: r.number)
        for r in ok[:3]:
            compiled = self._compiled_for(r.config)
            status, _, _ = self._run_in_child(r.config, compiled, measure=False)
            if status == "ok" and self.has_reference:
                return

    def _compiled_for(self, config: dict[str, Any]):
        key = config_key(config)
        if key not in self.compiled:
            res = self._compile_result(self._submit_compile(config))
            if res.get("status") != "ok":
                return None
            self.compiled[key] = res.get("compiled")
        return self.compiled[key]

    def _dispatch(self, trial, config: dict[str, Any], task) -> "_InFlight":
        """Send a config to the child (after its compile) without waiting for the answer; a compile
        failure, or a child that cannot take it, is the trial's result at once."""
        res = self._compile_result(task)
        if res["status"] != "ok":
            return _InFlight(trial, config, Result(trial.number, config, res["status"], error=res.get("error")))
        compiled = res.get("compiled")
        self.compiled[config_key(config)] = compiled
        try:
            self._send({"op": "run", "config": config, "compiled": compiled, "measure": True})
        except ChildTimeout as exc:
            return _InFlight(trial, config, Result(trial.number, config, "timeout", error=f"timeout: {exc}"))
        except ChildCrashed as exc:
            return _InFlight(trial, config, Result(trial.number, config, "runtime-error",
                                                   error=f"the GPU process died: {exc}"))
        return _InFlight(trial, config)

    def _dispatch_ready(self, pending) -> "_InFlight | None":
        """The next config, if its compile is done: sent to the child before the parent records the
        previous result, so the child measures while the parent writes to the database."""
        trial, config, task = pending[0]
        f = task.future
        if f is None or not f.done() or task.lost():
            return None
        pending.popleft()
        return self._dispatch(trial, config, task)

    def _collect(self, inflight: "_InFlight") -> Result:
        if inflight.result is not None:
            return inflight.result
        status, samples, error = self._answer()
        return Result(inflight.trial.number, inflight.config, status, samples if status == "ok" else [], error)

    def _interrupted(self) -> bool:
        """The search stopped from outside (cancelled, finished elsewhere, should_stop)."""
        reason = self.stop_reason or ""
        return reason == "asked to stop" or reason.startswith("job is ")

    def _would_continue(self, r: Result) -> bool:
        """Whether the search certainly goes on after recording `r` (then the next config may be sent
        first): the trial budget, the time budget and patience, as `_check_stop` will see them."""
        b = self.spec.budget
        if self.should_stop():
            return False
        if b.trials is not None and self.done + (1 if r.counted else 0) >= b.trials:
            return False
        if b.seconds is not None and self._elapsed() >= b.seconds:
            return False
        if b.patience is not None and r.counted:
            m = r.median_ms
            improved = m is not None and (self.best is None or m < self.best.median_ms)
            best_after = self.best is not None or m is not None
            if not improved and best_after and self.since_improvement + 1 >= b.patience:
                return False
        return True

    def _fail_pending(self, pending) -> None:
        """Trials asked but not run (a stop): failed in Optuna and put back in the queue."""
        for trial, config, task in pending:
            try:
                try:
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                finally:
                    self._live.discard(trial._trial_id)
                self._requeue(config, trial.number)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass   # failed already by the worker that re-claimed the job, which re-queued it
            except Exception as exc:  # noqa: BLE001
                if is_unavailable(exc):   # a dead trial fails by its heartbeat, or when the job is re-claimed
                    log.warning("could not put trial %d back (the database is unavailable)", trial.number)
                else:
                    log.exception("could not put trial %d back", trial.number)

    def _running_elsewhere(self, number: int) -> dict[str, int]:
        """Configs other runners of this job are evaluating right now (a shared study), with the
        number of the trial evaluating each."""
        if not self._maybe_shared:
            return {}
        out = {}
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if t.number != number and t.user_attrs.get("worker") != self.run_name and "config" in t.user_attrs:
                out[config_key(t.user_attrs["config"])] = t.number
        return out

    def _enqueue_untried(self, busy_configs) -> None:
        """The sampler only proposes configs it already knows (it has converged on a small space):
        hand it an untried valid config, so the budget buys new information."""
        if self.valid is None:
            return
        busy = set(self.seen) | {config_key(c) for c in busy_configs}
        untried = [c for c in self.valid if config_key(c) not in busy]
        if untried:
            cfg = untried[self._rng.randrange(len(untried))]
            self.study.enqueue_trial(self.space.encode(cfg), user_attrs={"untried_after_repeats": True})
            self._queued_left += 1

    def _want_more(self, n: int) -> bool:
        """Ask another config? `n` are asked and not yet recorded (compiling, compiled, in the child).

        The spec's `lookahead` when given. Otherwise: while known-good configs are queued (the
        spec's list, the previous winner, the default), up to 2 per compile worker, so that the pool
        compiles all of them at once while the GPU child starts; then 2 ahead for TPE (each result
        informs its next proposal), one per worker for samplers that learn nothing from results."""
        if self.spec.lookahead is not None:
            return n < self.spec.lookahead
        workers = self.pool.workers if self.pool is not None else 1
        base = 2 if self.sampler_kind == "tpe" else max(2, workers)
        return n < base or (self._queued_left > 0 and n < max(base, 2 * workers))

    def _fill(self, pending, inflight: "_InFlight | None") -> None:
        """Ask the sampler ahead and submit the compiles (constraint violations and repeats are
        answered at once)."""
        extra = 1 if inflight is not None else 0
        self._budget_elsewhere = False
        while self._want_more(len(pending) + extra) and self._asks < self._max_asks:
            if sum(1 for r in self.seen.values() if r.counted) + len(pending) + extra >= self.n_valid:
                break
            if not self._retry(lambda: self._ask_one(pending, inflight), "asking for a config"):
                break

    def _ask_one(self, pending, inflight: "_InFlight | None") -> bool:
        """Ask for one config and settle it: recorded as invalid, told as a repeat or as in flight
        elsewhere, or appended to `pending` with its compile submitted. False when the trial
        budget has no room. A sharing worker does it under the job's lock, with the results of the
        other workers read first (a config one of them has measured is a repeat). Retried after
        an outage, it goes on with the trial it had asked."""
        with self._shared_section():
            trial = self._unclassified
            if trial is None:
                if self._maybe_shared:
                    self._sync_seen()
                if not self._budget_has_room(len(pending) + (1 if inflight is not None else 0)):
                    return False
                self._asks += 1
                with self.timeline.phase("ask"):
                    trial = self.study.ask()
                self._unclassified = trial
                self._live.add(trial._trial_id)
                if self._queued_left > 0:
                    self._queued_left -= 1
                if self._maybe_shared:
                    self.storage.record_heartbeat(trial._trial_id)
            try:
                self._settle(trial, pending, inflight)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass   # finished already: told before an outage cut the answer off, or taken for an orphan
            self._unclassified = None
            if trial not in [t for t, _, _ in pending]:
                self._live.discard(trial._trial_id)
            return True

    def _settle(self, trial, pending, inflight: "_InFlight | None") -> None:
        with self.timeline.phase("ask"):
            trial.set_user_attr("worker", self.run_name)
            config = self.space.suggest(trial)
            trial.set_user_attr("config", config)
        key = config_key(config)
        bad = self.space.violations(config, self.env)
        if bad:
            r = Result(trial.number, config, "invalid", error=CONSTRAINT_PREFIX + "; ".join(bad), counted=False)
            self._record(r, trial)
            return
        busy = [c for _, c, _ in pending] + ([inflight.config] if inflight is not None else [])
        if key in self.seen:
            prev = self.seen[key]
            trial.set_user_attr("repeat_of", prev.number)
            mark(trial, prev.median_ms is not None)
            self.study.tell(trial, prev.median_ms if prev.median_ms is not None else math.inf)
            self._repeats += 1
            if self._repeats >= MAX_REPEATS:
                self._enqueue_untried(busy)
                self._repeats = 0
            return
        self._repeats = 0
        here = [(t, c) for t, c, _ in pending] + ([(inflight.trial, inflight.config)] if inflight is not None else [])
        twin = next((t.number for t, c in here if config_key(c) == key), None)
        if twin is None:
            twin = self._running_elsewhere(trial.number).get(key)
        if twin is not None:
            # the config is being measured (asked ahead here, or by another worker): a duplicate,
            # not a failure — pruned, naming its twin (optuna-dashboard shows both)
            trial.set_user_attr("duplicate_of", twin)
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            self._repeats += 1
            if self._repeats >= MAX_REPEATS:
                self._enqueue_untried(busy)
                self._repeats = 0
            return
        pending.append((trial, config, self._submit_compile(config)))

    def search(self) -> None:
        pending: collections.deque = collections.deque()
        self._asks = self._repeats = 0
        self._max_asks = 20 * (self.spec.budget.trials or 1000) + 1000
        self._first_sent = self._last_answer = None
        tl = self.timeline
        t_search = time.monotonic()
        busy_before = tl.seconds.get("child_busy", 0.0)
        self.done = self._retry(self.counted_done, "counting the recorded trials")
        inflight: _InFlight | None = None
        # the first compiles go out before the GPU child is waited for: they overlap its start-up
        self._retry(self._sync_seen, "reading the recorded trials")
        if self._retry(self._check_stop, "reading the job's state") is None:
            self._fill(pending, None)
        self._ensure_child()
        if self._recompile:     # the child's device differs from what the parent compiled for
            pending = collections.deque((t, c, self._submit_compile(c)) for t, c, _ in pending)
            self._recompile = False
        self._restore_reference()
        while True:
            self._retry(self._sync_seen, "reading the recorded trials")
            self.stop_reason = self._retry(self._check_stop, "reading the job's state")
            if self.stop_reason:
                break
            self._fill(pending, inflight)
            if inflight is None:
                if not pending:
                    if self._budget_elsewhere:
                        # another worker sharing the job runs its last trials and finishes it
                        self.stop_reason = "the rest of the trial budget is in flight on other workers"
                    elif self._asks >= self._max_asks:
                        self.stop_reason = "sampler keeps proposing known configs"
                    elif self.stop_reason is None:
                        self.stop_reason = (self._retry(self._check_stop, "reading the job's state")
                                            or "search space exhausted")
                    break
                inflight = self._dispatch(*pending.popleft())
            trial = inflight.trial
            r = self._collect(inflight)
            inflight = None
            if pending and self._would_continue(r):
                inflight = self._dispatch_ready(pending)
            self._record(r, trial)
        if inflight is not None:
            # stopped while the next config was in the child (it was sent before the stop could be
            # known: a time budget, a cancel, should_stop). Its answer is read either way (the pipe
            # must be clean for the re-measurement); a run that goes on to finish records it, a
            # cancelled or stopped one puts the trial back in the queue like the other asked ones
            r = self._collect(inflight)
            if self._interrupted():
                pending.appendleft((inflight.trial, inflight.config, None))
            else:
                self._record(r, inflight.trial)
        self._fail_pending(pending)
        self._retry(lambda: self._save_elapsed(force=True), "saving the elapsed time")
        # kept in the study for the dashboard, which explains why a job ended before its budget
        self._retry(lambda: self.study.set_user_attr(f"stop_reason:{self.run_name}", self.stop_reason),
                    "saving the stop reason")
        tl.add("search", time.monotonic() - t_search)
        if self._first_sent is not None and self._last_answer is not None:
            busy = tl.seconds.get("child_busy", 0.0) - busy_before
            tl.add("child_idle", (self._last_answer - self._first_sent) - busy)
        self.on_event("stop", {"reason": self.stop_reason})

    # --- the end ----------------------------------------------------------------------------

    def finalize(self) -> None:
        t_finalize = time.monotonic()
        ok = sorted((r for r in self.seen.values() if r.median_ms is not None), key=lambda r: r.median_ms)
        if not ok:
            counts = collections.Counter(r.status for r in self.seen.values())
            detail = ", ".join(f"{n} {s}" for s, n in counts.most_common()) or "no trials"
            first_err = next((r.error for r in sorted(self.seen.values(), key=lambda r: r.number) if r.error), None)
            raise RuntimeError(f"no config ran correctly ({detail})" + (f"; first error: {first_err}" if first_err else ""))
        finalists = ok[: max(1, self.spec.measure.remeasure_top)]
        default = None
        if self.default_config is not None:
            default = self.seen.get(config_key(self.default_config))
            if default is not None and default.median_ms is not None and default not in finalists:
                finalists = finalists + [default]
        remeasured: dict[str, float] = {}
        if self.spec.measure.remeasure_top > 0 and len(finalists) > 0:
            self.on_event("remeasure", {"configs": [r.config for r in finalists]})
            items = [{"config": r.config, "compiled": self._compiled_for(r.config)} for r in finalists]
            try:
                with self.timeline.phase("remeasure"):
                    self._send({"op": "remeasure", "items": items, "rounds": self.spec.measure.remeasure_rounds})
                    resp = self.child.receive(self.spec.measure.timeout_s * len(items) * 2 + 60)
                for r, samples, err in zip(finalists, resp["samples_ms"], resp["errors"]):
                    if samples and not err:
                        samples = sorted(samples)
                        n = len(samples)
                        remeasured[config_key(r.config)] = samples[n // 2] if n % 2 else (samples[n // 2 - 1] + samples[n // 2]) / 2
            except ChildError as exc:
                log.warning("re-measurement failed (%s); keeping the search's medians", exc)
        def final_ms(r: Result) -> float:
            return remeasured.get(config_key(r.config), r.median_ms)

        # the default config is a legitimate candidate: if it wins the fair re-measurement, it stays
        winner = min(finalists, key=final_ms)
        best_ms = final_ms(winner)
        default_ms = final_ms(default) if default is not None and default.median_ms is not None else None
        self.winner, self.winner_ms, self.default_ms = winner, best_ms, default_ms
        remeasured_ms = {config_key(r.config): remeasured.get(config_key(r.config)) for r in finalists}
        self._retry(lambda: self.study.set_user_attr("remeasured_ms", remeasured_ms), "saving the re-measurement")

        def publish() -> bool:
            now = utcnow()
            done = (sa.select(sa.func.count()).select_from(Trial).where(repo.counted_trials(self.job_id))
                    .scalar_subquery())
            with self.Session.begin() as s:
                res = s.execute(sa.update(Job).where(Job.id == self.job_id, Job.state == "running").values(
                    best_config=winner.config, best_time_ms=best_ms, progress=1.0, trials_done=done,
                    state="succeeded", finished_at=now, updated_at=now, lease_expires_at=None, error=None))
                if res.rowcount != 1:
                    return False   # cancelled, or finished by another worker sharing the job: its winner stands
                repo.upsert_best_config(s, kernel_fingerprint=self.fingerprint, kernel_name=self.kernel_name,
                                        problem_key=repo.canonical_key(self.spec.problem_key()),
                                        gpu_model=self.gpu_model, compute_capability=self.capability,
                                        config=winner.config, median_ms=best_ms, default_ms=default_ms,
                                        job_id=self.job_id)
            return True

        if not self._retry(publish, "storing the winner"):
            log.info("job %d was finished elsewhere (or cancelled) during the re-measurement; winner not stored",
                     self.job_id)
        tl = self.timeline
        tl.add("finalize", time.monotonic() - t_finalize)
        tl.add("total", tl.since_start())
        self.timeline_data = tl.as_dict()
        log.info("job %d: winner %s %.4g ms; timeline:\n%s", self.job_id, winner.config, best_ms,
                 format_timeline(self.timeline_data, indent="  "))
        self.on_event("done", {"config": winner.config, "median_ms": best_ms, "default_ms": default_ms,
                               "number": winner.number, "remeasured": bool(remeasured),
                               "gpu_model": self.gpu_model, "reason": self.stop_reason,
                               "timeline": self.timeline_data})

    # --- driver -----------------------------------------------------------------------------

    def _start_pool(self) -> None:
        from tuner.compile_step import warm_up

        tl = self.timeline
        self.pool = CompilePool(self.compile_workers)
        tl.details["compile_workers"] = self.pool.workers
        left = [self.pool.workers]

        def one_done(_f) -> None:     # in the executor's thread: a float written once
            left[0] -= 1
            if left[0] == 0:
                tl.mark("pool_ready")

        for f in self.pool.start_workers(warm_up):   # every worker starts now, while the child does
            f.add_done_callback(one_done)
        if not self.interpret:
            # the native launcher's C build (a fresh cache: ~0.5 s), off the child's first launch
            from tuner.compile_step import prebuild_launcher

            def built(f) -> None:
                if not f.cancelled() and f.exception() is None:
                    tl.add("launcher_build", f.result())

            self.pool.submit_untracked(prebuild_launcher).add_done_callback(built)

    def run(self) -> None:
        self.timeline = tl = Timeline()
        if not self._retry(self._load, "loading the job"):
            return
        self.t0 = time.monotonic()
        try:
            # the GPU child (torch, the CUDA context, the inputs: seconds) and the compile workers
            # start first; the device's properties come from the driver in the parent, so that the
            # study opens and the first compiles go out while the child is still starting
            self._launch_child()
            self._start_pool()
            with tl.phase("props"):
                props = self._parent_props()
            if props is None:
                self._ensure_child()           # no driver answer here: the child's (today's order)
            else:
                self._set_props(props)
            self._retry(self._record_gpu, "recording the GPU")
            with tl.phase("study_open"):
                self._retry(self._open_and_resume, "opening the Optuna study")
            self._start_heartbeats()
            tl.details["lookahead"] = self.spec.lookahead if self.spec.lookahead is not None else "auto"
            self.on_event("start", {"job_id": self.job_id, "study": self.study_name, "sampler": self.sampler_kind,
                                    "total": self.trials_total, "space": self.space.size, "valid": self.n_valid,
                                    "gpu_model": self.gpu_model, "seconds": self.spec.budget.seconds})
            self.search()

            def state() -> str | None:
                with self.Session() as s:
                    return repo.job_state(s, self.job_id)

            if self._retry(state, "reading the job's state") != "running" or self.should_stop() or self._budget_elsewhere:
                return   # cancelled, finished (or being finished) by another worker, or stopped: resumable
            self.finalize()
        except Exception as exc:
            if is_unavailable(exc):
                # stopped while the database was unreachable: not the job's failure
                log.warning("job %d: stopped while the database is unavailable; the job stays running and "
                            "resumes when claimed again", self.job_id)
                return
            log.exception("job %d failed", self.job_id)
            with self.Session.begin() as s:
                repo.finish_job(s, self.job_id, "failed", error=f"{type(exc).__name__}: {exc}\n"
                                f"{traceback.format_exc()[-3000:]}")
            self.on_event("failed", {"error": f"{type(exc).__name__}: {exc}"})
        finally:
            if self.timeline_data is None:      # stopped, cancelled or failed: where the time went so far
                self.timeline.add("total", self.timeline.since_start())
                log.info("job %d timeline (not finished):\n%s", self.job_id,
                         format_timeline(self.timeline.as_dict(), indent="  "))
            self.close()

    def _open_and_resume(self) -> None:
        if self.storage is not None:   # a retry after an outage: the last attempt's storage goes
            with contextlib.suppress(Exception):
                self.storage.engine.dispose()
        self._open_study()
        self._resume_state()
        self._enqueue_known_good()
        self._count_queued()

    def close(self) -> None:
        if self._beat_stop is not None:
            self._beat_stop.set()
        if self.pool is not None:
            self.pool.close()
        if self.child is not None:
            self.child.close()
        if self.storage is not None:
            try:
                self.storage.remove_session()
                self.storage.engine.dispose()
            except Exception:  # noqa: BLE001
                pass
        self.engine.dispose()


def run_job(db_url: str, job_id: int, *, device: int = 0, interpret: bool = False, worker_id: str | None = None,
            should_stop: Callable[[], bool] | None = None, on_event: EventFn | None = None,
            reclaimed: bool = False) -> None:
    """Run (or resume) job `job_id` stored in `db_url`; see the module doc. `reclaimed`: the job
    was claimed after its lease expired (service.claim), so the RUNNING trials of its study are
    a dead worker's: they are failed at once and their configs re-queued."""
    Tuner(db_url, job_id, device=device, interpret=interpret, worker_id=worker_id, should_stop=should_stop,
          on_event=on_event, reclaimed=reclaimed).run()


def create_job_from_spec(db_url: str, spec: JobSpec, *, gpu_model: str | None = None,
                         idempotency_key: str | None = None) -> int:
    """Register the kernel and a queued job for `spec` (what `blocktune tune` and tests do)."""
    import compiler

    fn = compiler.jit_from_source(spec.kernel.source, spec.kernel.name)
    engine = make_engine(db_url)
    try:
        with session_factory(engine).begin() as s:
            k = repo.get_or_create_kernel(s, fingerprint=fn.fingerprint, name=spec.kernel.name,
                                          source=spec.kernel.source, compiler_version=compiler.__version__)
            job = repo.create_job(s, k, spec.to_json(), gpu_model=gpu_model, idempotency_key=idempotency_key,
                                  trials_total=spec.budget.trials)
            return job.id
    finally:
        engine.dispose()
