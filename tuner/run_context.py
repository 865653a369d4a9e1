"""What the parts of one run of a job share: the job as loaded, its database, the run's timeline, and
the two rules of touching a job that other workers may run too — its lock, and retrying through
outages."""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Callable

from db import repo
from db.engine import make_engine, normalize_url, session_factory
from db.job_lock import job_lock
from db.retry import retry
from jobspec.model import JobSpec
from tuner.timeline import Timeline

log = logging.getLogger("blocktune.tuner")

EventFn = Callable[[str, dict[str, Any]], None]


class RunContext:
    """One run of job `job_id` by `worker_id` (a service worker, whose jobs others may share) or by a
    local run (`worker_id` None: `blocktune tune`, tests)."""

    def __init__(self, db_url: str, job_id: int, *, worker_id: str | None = None,
                 should_stop: Callable[[], bool] | None = None, on_event: EventFn | None = None):
        self.db_url = normalize_url(db_url)
        self.job_id = job_id
        self.worker_id = worker_id
        self.run_name = worker_id or "local"
        self.shared = worker_id is not None          # only service workers share jobs
        self.should_stop = should_stop or (lambda: False)
        self.on_event = on_event or (lambda kind, data: None)
        self.engine = make_engine(self.db_url)
        self.Session = session_factory(self.engine)
        self.timeline = Timeline()
        self._held = threading.local()             # the job's lock, per thread (tuner/write_behind.py)
        # the job, once load() found it unfinished
        self.spec: JobSpec | None = None
        self.fingerprint = self.kernel_name = self.study_name = self.identity = ""
        self.fresh = False
        self.joining = False

    def load(self) -> bool:
        """Mark the job running (db.repo.start_job) and read it; False when it is already finished."""
        with self.Session.begin() as s:
            job = repo.start_job(s, self.job_id, worker=self.worker_id)
            if job is None:
                return False
            self.spec = JobSpec.model_validate(job.spec)
            self.fingerprint, self.kernel_name = job.kernel.fingerprint, job.kernel.name
            self.study_name = job.study_name
            # nothing recorded yet and no other worker holds it: this run creates the study, and its
            # first asks are the known-good configs (compiled before the study is open, engine.py)
            self.fresh = job.trials_done == 0 and (not self.shared or job.claimed_by == self.worker_id)
            # nothing recorded yet and another worker holds it: this run joins a study whose queue
            # the claimer filled with the known-good configs, and asks the next ones after its
            self.joining = job.trials_done == 0 and self.shared and job.claimed_by != self.worker_id
            # the job's identity beyond (database URL, id): a new database at the same path reuses
            # ids, and must not find the reference outputs an older job-1 left in its work directory
            self.identity = f"{job.created_at.isoformat() if job.created_at else ''}|{job.kernel.fingerprint}"
        return True

    def retry(self, fn: Callable[[], Any], what: str) -> Any:
        """`fn()`, retried through database outages (db.retry) until it succeeds; gives up
        (DatabaseUnavailable) only when the run is asked to stop meanwhile. Inside the job's lock
        it is called once: the outage that failed it may have dropped the lock (a PostgreSQL
        restart ends the session holding it), so the retry around the whole locked section
        takes it again."""
        if self._lock_depth > 0 and self.shared:
            return fn()
        return retry(fn, f"job {self.job_id}: {what}", log=log, give_up=self.should_stop)

    @contextlib.contextmanager
    def section(self):
        """The job's lock (db.job_lock) when other workers may share the job; reentrant in one thread."""
        if not self.shared or self._lock_depth > 0:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        asked = time.monotonic()
        with job_lock(self.engine, self.job_id):
            taken = time.monotonic()
            self.timeline.add("lock_wait", taken - asked)
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                self.timeline.add("lock_held", time.monotonic() - taken)

    def ask_section(self):
        """Where a sharing worker asks Optuna for a trial: under the job's lock only on SQLite, whose
        driver reads and writes in separate transactions, so that two processes popping Optuna's
        queue at once could both take one queued trial. On PostgreSQL Optuna pops and creates
        trials under row locks of its own, and asks go on side by side (the budget is kept by
        claims: tuner/trial_claims.py)."""
        if self.engine.dialect.name == "sqlite":
            return self.section()
        return contextlib.nullcontext()

    @property
    def _lock_depth(self) -> int:
        return getattr(self._held, "depth", 0)

    @_lock_depth.setter
    def _lock_depth(self, depth: int) -> None:
        self._held.depth = depth

    def close(self) -> None:
        self.engine.dispose()
