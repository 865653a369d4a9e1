"""The worker: attaches to one GPU, registers its model, claims jobs for that model, renews the
job's lease by heartbeat, and runs the tuner (`tuner.engine.run_job`) on the job.

- wake-ups: an idle worker waits on db.job_wakeups.JobWakeups, which returns as soon as a job is
  submitted, given back or claimed (a claimed job is joinable), so a job starts at once; the poll
  interval stays the fallback (a lease expiring makes a job claimable with no event; separate
  processes on SQLite have no signal between them).
- claim: one atomic statement (db.repo.claims); a job whose worker died is claimable again once
  its lease has expired, and the tuner resumes its Optuna study (finished trials are kept).
- join: with no job to claim, a worker may join a running job of its GPU model (the study is
  shared; Optuna's `constant_liar` keeps the workers from proposing the same config). It leaves
  that job between trials for a job no worker took, which it claims first (it learns of one from
  a wake-up).
- warm start: before it registers, the worker starts its GPU child (imports, CUDA context or interpreter)
  and its compile pool (tuner/standby.py); each job takes them, so that a job's start pays only for
  its own inputs and reference. They are stopped with the worker.
- shutdown (SIGTERM/SIGINT or stop()): the tuner is asked to stop after the current trial, and a job
  this worker holds goes back to the queue.
- database outages: claiming, heartbeats and the tuner's writes are retried with capped
  exponential backoff (db.retry) until the database is back; the heartbeat retries within a
  second or two, so the lease is renewed as soon as it can be. If the lease expired meanwhile and
  another worker claimed the job, this worker stops working on it (its unrecorded trials were
  failed and re-queued by the new holder).
"""
from __future__ import annotations

import logging
import socket
import threading
import time
import traceback
from typing import Any, Callable

import sqlalchemy as sa

from db import repo
from db.engine import session_factory
from db.job_wakeups import JobWakeups
from db.models import Gpu, Job
from db.repo import claim, find_joinable_job, gpu_worker_alive, release_job, renew_lease
from db.retry import Backoff, DatabaseUnavailable, Outage, is_unavailable, retry
from jobspec.device import INTERPRETER_MODEL
from service.devices import cpu_worker_properties

log = logging.getLogger("blocktune.worker")


def device_props(device: int, interpret: bool) -> dict[str, Any]:
    """What this worker registers: the GPU's properties, or a CPU worker's (service.devices)."""
    if interpret:
        return cpu_worker_properties()
    from compiler.runtime import driver

    return driver.device_properties(device)


_OPTUNA_LOCK = 7262332


def init_optuna_storage(database_url: str) -> None:
    """Create Optuna's tables once, serialized: several workers starting together on a fresh
    PostgreSQL database would otherwise race in CREATE TABLE (RDBStorage creates its schema on
    first use). On SQLite the database file's lock serializes it already."""
    from tuner.study import optuna_storage

    engine = None
    try:
        from db.engine import make_engine

        engine = make_engine(database_url)
        if engine.dialect.name == "postgresql":
            with engine.connect() as c:
                c.exec_driver_sql(f"SELECT pg_advisory_lock({_OPTUNA_LOCK})")
                try:
                    storage = optuna_storage(database_url)
                    storage.engine.dispose() if hasattr(storage, "engine") else None
                finally:
                    c.exec_driver_sql(f"SELECT pg_advisory_unlock({_OPTUNA_LOCK})")
                    c.commit()
        else:
            storage = optuna_storage(database_url)
            storage.engine.dispose() if hasattr(storage, "engine") else None
    finally:
        if engine is not None:
            engine.dispose()


def default_worker_name(device: int, interpret: bool = False) -> str:
    """`<node>-gpu<N>` (`-cpu<N>` for the interpreter): unique per host and GPU, the same after a
    restart. The node is $BLOCKTUNE_NODE (in containers, whose host name is not the host's), else
    the host name."""
    from service.core.config import Settings

    node = Settings().node or socket.gethostname()
    return f"{node}-{'cpu' if interpret else 'gpu'}{device}"


class WorkerNameInUse(RuntimeError):
    def __init__(self, name: str):
        super().__init__(f"a live worker is already registered as {name!r} (its heartbeat keeps moving): give "
                         "every worker its own name (--name / BLOCKTUNE_WORKER_NAME; in docker compose set "
                         "BLOCKTUNE_NODE to each host's name)")


_UNSEEN = object()


def _settings_alive_seconds() -> float:
    from service.core.config import Settings

    return Settings().worker_alive_seconds


class Worker:
    def __init__(self, database_url: str, device: int = 0, *, interpret: bool = False, name: str | None = None,
                 lease_seconds: float = 60.0, heartbeat_seconds: float = 10.0, poll_seconds: float = 2.0,
                 join: bool = True, exit_when_idle: bool = False, alive_seconds: float | None = None,
                 run_job: Callable[..., None] | None = None, warm: bool = True):
        from db.engine import make_engine

        self.database_url = database_url
        self.device = device
        self.interpret = interpret
        # an explicit name is the operator's: a live worker holding it is an error; the default
        # name is stable across restarts (one row per host and GPU) and takes a suffix when taken
        self._name_given = name is not None
        self.name = name or default_worker_name(device, interpret)
        self.alive_seconds = alive_seconds if alive_seconds is not None else _settings_alive_seconds()
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = min(heartbeat_seconds, lease_seconds / 3)
        self.poll_seconds = poll_seconds
        self.join_jobs = join
        self.exit_when_idle = exit_when_idle
        self._run_job = run_job
        self.warm = warm
        self.standby = None           # tuner.standby.Standby: the warm GPU child and compile pool
        self.engine = make_engine(database_url)
        self.gpu_model: str | None = None
        self.worker_id: int | None = None
        self.current_job: int | None = None
        self.jobs_run: list[int] = []
        self._stop = threading.Event()
        self._wakeups: JobWakeups | None = None    # open while run() runs
        self._joined = False
        # the job this worker claimed and another worker claimed since (this one's lease expired,
        # e.g. through a long database outage), set by the heartbeat: the tuner stops
        self._lost_job: int | None = None
        self._thread: threading.Thread | None = None
        self._hb_thread: threading.Thread | None = None
        self._finished_joins: set[int] = set()
        self._leaving: int | None = None     # the joined job this worker leaves for a waiting one
        self._claimed_next = None            # db.repo.Claim: the waiting job it claimed, run next
        self._leave_lock = threading.Lock()  # should_stop is asked from the tuner's threads

    def _db(self, fn: Callable[[], Any], what: str, *, give_up: Callable[[], bool] | None = None) -> Any:
        """`fn()`, retried through database outages until it succeeds or the worker stops."""
        return retry(fn, what, log=log, give_up=give_up or self._stop.is_set, sleep=self._stop.wait)

    # -- registration and heartbeat ----------------------------------------------------------
    def register(self) -> None:
        self._db(self._register, f"registering worker {self.name}")
        if self.interpret:
            log.info("worker %s registered: a CPU worker (the interpreter), taking jobs for %s", self.name,
                     self.gpu_model)
        else:
            log.info("worker %s registered on %s (device %d)", self.name, self.gpu_model, self.device)

    def _register(self) -> None:
        init_optuna_storage(self.database_url)
        props = device_props(self.device, self.interpret)
        with session_factory(self.engine).begin() as s:
            gpu = repo.get_or_create_gpu(s, props)
            s.flush()
            gpu_id, gpu_model = gpu.id, gpu.model
        self.worker_id = self._take_name(gpu_id)
        self.gpu_model = gpu_model

    def _take_name(self, gpu_id: int) -> int:
        """The id of the worker row this worker now owns. Two live workers never share a row: a
        name whose row is alive (heartbeat younger than alive_seconds, not stopped) is taken over
        only once that worker is gone. The default name then takes a suffix at once (`-2`, ...); an
        explicit name waits up to alive_seconds for the row to go stale (a predecessor that died
        without marking itself stopped, e.g. a killed container) and is refused when its heartbeat
        moves meanwhile: another live worker uses it."""
        base, suffix = self.name, 1
        deadline = time.monotonic() + self.alive_seconds + 1.0
        seen_heartbeat: Any = _UNSEEN
        while True:
            with session_factory(self.engine).begin() as s:
                gpu = s.get(Gpu, gpu_id)
                got = repo.register_worker(s, name=self.name, gpu=gpu, device_index=self.device,
                                           alive_seconds=self.alive_seconds)
            if got.worker_id is not None:
                return got.worker_id
            heartbeat = got.holder_heartbeat
            if heartbeat is None:     # lost an insert race: look again
                continue
            if not self._name_given:
                suffix += 1
                self.name = f"{base}-{suffix}"
                continue
            if seen_heartbeat is not _UNSEEN and heartbeat != seen_heartbeat:
                raise WorkerNameInUse(self.name)
            if seen_heartbeat is _UNSEEN:
                log.warning("a worker named %s is alive (last heartbeat %s); waiting up to %.0f s for it to be "
                            "gone", self.name, heartbeat, self.alive_seconds)
                seen_heartbeat = heartbeat
            if time.monotonic() > deadline or self._stop.wait(1.0):
                raise WorkerNameInUse(self.name)

    def _set_state(self, state: str) -> None:
        with session_factory(self.engine).begin() as s:
            repo.set_worker_state(s, self.worker_id, state)

    def heartbeat(self) -> None:
        """Mark this worker alive and renew the lease of the job it works on."""
        job = self.current_job
        joined = self._joined          # written before current_job (run_one): this job's
        self._set_state("busy" if job is not None else "idle")
        if job is None or renew_lease(self.engine, job, self.lease_seconds, holder=None if joined else self.name):
            return
        with self.engine.connect() as c:
            row = c.execute(sa.select(Job.state, Job.claimed_by).where(Job.id == job)).first()
        if row is not None and row.state == "running" and self._lost_job != job:
            log.warning("worker %s lost job %d: its lease expired and worker %s claimed it; stopping work on it",
                        self.name, job, row.claimed_by)
            self._lost_job = job

    def _heartbeat_loop(self) -> None:
        """Every `heartbeat_seconds`; while the database is unreachable, every second or two, so
        that the lease is renewed as soon as it is back."""
        backoff = Backoff(initial=0.2, cap=min(2.0, self.heartbeat_seconds))
        outage = Outage(log, f"renewing worker {self.name}'s heartbeat and lease")
        wait = self.heartbeat_seconds
        while not self._stop.wait(wait):
            try:
                self.heartbeat()
            except Exception as exc:  # a database hiccup must not kill the heartbeat
                if is_unavailable(exc):
                    wait = backoff.next()
                    outage.failed(exc, wait)
                else:
                    log.exception("heartbeat failed")
                    wait = self.heartbeat_seconds
                continue
            outage.recovered()
            backoff.reset()
            wait = self.heartbeat_seconds

    # -- the loop ----------------------------------------------------------------------------
    def should_stop(self) -> bool:
        """Whether the tuner should stop after its current trial: the worker stops, it lost the job
        it claimed, or it joined another worker's job and a job that no worker took is waiting."""
        return (self._stop.is_set() or (self._lost_job is not None and self._lost_job == self.current_job)
                or self._leaves_for_waiting_job())

    def _leaves_for_waiting_job(self) -> bool:
        """A worker that joined a job leaves it for a job that is waiting for a worker: a second
        worker shortens a running job by less than a first one shortens a waiting job (two jobs
        submitted together would otherwise run one after the other, each shared, when the second
        arrives just after the first's claim woke the idle worker). It claims the waiting job first
        and leaves only if it got it, so that of several workers on a job one leaves per waiting
        job. Looked at only when a wake-up came meanwhile (a job created, claimed or given back):
        one claim attempt then, nothing per trial."""
        job = self.current_job
        if not self._joined or job is None:
            return False
        with self._leave_lock:
            if self._leaving == job:
                return True
            wakeups = self._wakeups
            if wakeups is None or not wakeups.pending():
                return False
            try:
                got = claim(self.engine, self.name, self.gpu_model, self.lease_seconds, unpinned=self._unpinned())
            except Exception as exc:  # noqa: BLE001 - an outage: stay on the job, the next wake-up looks again
                log.debug("worker %s could not look for a waiting job: %s", self.name, exc)
                return False
            if got is None:
                return False
            log.info("worker %s leaves job %d (joined) for job %d, which waited for a worker", self.name, job,
                     got.job_id)
            self._leaving, self._claimed_next = job, got
            return True

    def stop(self) -> None:
        self._stop.set()
        wakeups = self._wakeups
        if wakeups is not None:
            wakeups.wake()

    def next_job(self) -> tuple[int, bool, bool] | None:
        """(job id, joined, re-claimed after its lease expired) or None."""
        return self._db(self._next_job, f"worker {self.name} claiming a job")

    def _unpinned(self) -> bool:
        """Whether this worker takes jobs that name no GPU model: a CPU worker leaves them to the
        GPU workers while one is alive."""
        return not self.interpret or not gpu_worker_alive(self.engine, self.lease_seconds, cpu_model=INTERPRETER_MODEL)

    def _next_job(self) -> tuple[int, bool, bool] | None:
        with self._leave_lock:
            got, self._claimed_next = self._claimed_next, None     # claimed while leaving a joined job
        if got is None:
            got = claim(self.engine, self.name, self.gpu_model, self.lease_seconds, unpinned=self._unpinned())
        if got is not None:
            self._finished_joins.discard(got.job_id)
            if got.reclaimed:
                log.warning("worker %s re-claims job %d: the lease of %s expired", self.name, got.job_id,
                            got.previous_holder or "its previous worker")
            return got.job_id, False, got.reclaimed
        if self.join_jobs:
            job = find_joinable_job(self.engine, self.name, self.gpu_model)
            if job is not None and job not in self._finished_joins:
                return job, True, False
        return None

    def run_one(self, job_id: int, joined: bool, reclaimed: bool = False) -> None:
        run_job = self._run_job
        if run_job is None:
            from tuner.engine import run_job
        self._lost_job = None
        self._leaving = None
        self._joined = joined
        self.current_job = job_id
        self.jobs_run.append(job_id)
        log.info("worker %s %s job %d", self.name, "joins" if joined else "claimed", job_id)
        try:
            self._db(self.heartbeat, f"worker {self.name} starting job {job_id}")
            kw = {"standby": self.standby} if self.standby is not None else {}
            run_job(self.database_url, job_id, device=self.device, interpret=self.interpret, worker_id=self.name,
                    should_stop=self.should_stop, reclaimed=reclaimed, **kw)
        except Exception as exc:
            if is_unavailable(exc):
                log.warning("worker %s stopped job %d while the database is unavailable; it stays running and "
                            "resumes once claimed again", self.name, job_id)
            else:
                log.exception("job %d failed in worker %s", job_id, self.name)
                self._mark_failed(job_id, exc)
        finally:
            self.current_job = None
            if self._stop.is_set() and self._release(job_id):
                log.info("worker %s returned job %d to the queue", self.name, job_id)
            elif self._leaving == job_id:
                self._leaving = None     # left for a waiting job: it may join this one again later
            else:
                # don't join this job again right away: the tuner returned, so this worker's
                # share of it is done (another worker still finishing a trial may hold it)
                self._finished_joins.add(job_id)

    def _give_back_claimed_next(self) -> None:
        """Stopped between leaving a joined job and running the waiting job it claimed: back to the queue."""
        with self._leave_lock:
            got, self._claimed_next = self._claimed_next, None
        if got is None:
            return
        try:
            if self._release(got.job_id):
                log.info("worker %s returned job %d to the queue", self.name, got.job_id)
        except Exception as exc:  # noqa: BLE001 - its lease expires: another worker claims it then
            log.warning("worker %s could not return job %d to the queue: %s", self.name, got.job_id, exc)

    def _mark_failed(self, job_id: int, exc: BaseException) -> None:
        error = f"worker {self.name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-4000:]}"

        def mark() -> None:
            with session_factory(self.engine).begin() as s:
                repo.finish_job(s, job_id, "failed", error=error, only_if_running=True)
        try:
            self._db(mark, f"marking job {job_id} failed")
        except DatabaseUnavailable:
            log.warning("could not mark job %d failed (the database is unavailable)", job_id)

    def _release(self, job_id: int) -> bool:
        """Give the job back on shutdown; one try: a worker stopping during an outage leaves the
        job to its lease."""
        try:
            return self._db(lambda: release_job(self.engine, job_id, self.name), f"returning job {job_id}",
                            give_up=lambda: True)
        except DatabaseUnavailable:
            log.warning("could not return job %d to the queue (the database is unavailable); it is claimable "
                        "again when its lease expires", job_id)
            return False

    def _start_standby(self) -> None:
        """The warm GPU child and compile pool (tuner/standby.py), started before the worker registers:
        a registered worker runs its first job as warm as its next ones."""
        from tuner.standby import Standby

        from tuner.study import prepare_storage

        self.standby = Standby(device=self.device, interpret=self.interpret)
        prepare_storage(self.database_url)      # while the child and the pool start
        waited = self.standby.wait_warm(give_up=self._stop.is_set)
        log.info("worker %s: GPU child and compile pool warm in %.2f s", self.name, waited)

    def _close_standby(self) -> None:
        if self.standby is not None:
            self.standby.close()
            self.standby = None

    def _close_wakeups(self) -> None:
        wakeups, self._wakeups = self._wakeups, None
        if wakeups is not None:
            wakeups.close()

    def _close_idle_parts(self) -> None:
        """What run() opened before the worker registered: its standby, wake-ups and engine."""
        self._close_standby()
        self._close_wakeups()
        self.engine.dispose()

    def run(self) -> None:
        """Register, then claim and run jobs until stopped (or idle with exit_when_idle)."""
        try:
            if self.warm and self.standby is None:
                self._start_standby()
            # listening before registering: no job submitted once this worker is seen alive is missed
            self._wakeups = JobWakeups(self.database_url)
            if self.worker_id is None:
                self.register()
        except DatabaseUnavailable:
            log.warning("worker %s stopped before it could register (the database is unavailable)", self.name)
            self._close_idle_parts()
            return
        except BaseException:
            self._close_idle_parts()
            raise
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, name=f"heartbeat-{self.name}", daemon=True)
        self._hb_thread.start()
        try:
            while not self._stop.is_set():
                try:
                    nxt = self.next_job()
                except DatabaseUnavailable:
                    break    # stopped while the database was unreachable
                if nxt is None:
                    if self.exit_when_idle:
                        break
                    self._wakeups.wait(self.poll_seconds)
                    continue
                self.run_one(*nxt)
        finally:
            self._stop.set()
            self._give_back_claimed_next()
            self._close_standby()
            self._close_wakeups()
            try:
                self._set_state("stopped")
            except Exception as exc:
                if not is_unavailable(exc):
                    log.exception("could not mark worker %s stopped", self.name)
                else:
                    log.warning("could not mark worker %s stopped (the database is unavailable)", self.name)
            self.engine.dispose()
            log.info("worker %s stopped", self.name)

    # -- as a thread (inside `blocktune serve`) ----------------------------------------------
    def start_thread(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"worker-{self.name}", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
