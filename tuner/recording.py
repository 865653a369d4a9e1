"""The database side of a run's results: every trial in `tuning_trials`, the job's progress and its
winner (all written through db.repo), and what this run knows of the results so far — its own and
those of other workers sharing the job."""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from db import repo
from db.models import Trial
from jobspec.problem_key import canonical_key
from tuner import study_reads
from tuner.results import Result
from tuner.run_context import RunContext
from tuner.space import config_key


class Recorder:
    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.seen: dict[str, Result] = {}          # config_key → its result (one per config)
        self.best: Result | None = None
        self.since_improvement = 0                 # counted trials since the best improved (patience)
        self.done = 0                              # counted trials of the job (all workers)
        self.workers: set[str] = set()             # the workers that recorded its trials
        self._last_trial_id = 0

    # --- what is known -------------------------------------------------------------------------

    def sync(self) -> None:
        """Results recorded by earlier runs, or by other workers sharing this job's study."""
        with self.ctx.Session() as s:
            rows = s.scalars(sa.select(Trial).where(Trial.job_id == self.ctx.job_id, Trial.id > self._last_trial_id)
                             .order_by(Trial.id)).all()
            for t in rows:
                self._last_trial_id = max(self._last_trial_id, t.id)
                if t.worker:
                    self.workers.add(t.worker)
                key = config_key(t.config)
                if key in self.seen and self.seen[key].number != t.number:
                    continue
                r = Result(t.number, dict(t.config), t.status, list(t.samples_ms or []), t.error,
                           counted=not (t.status == "invalid"
                                        and (t.error or "").startswith(repo.UNCOUNTED_ERROR_PREFIX)))
                self.seen[key] = r
                self.note_best(r)

    def note_best(self, r: Result) -> bool:
        m = r.median_ms
        if m is None:
            return False
        if self.best is None or m < self.best.median_ms:
            self.best = r
            return True
        return False

    def note(self, r: Result) -> None:
        """A result this run has recorded."""
        self.seen[config_key(r.config)] = r
        if self.ctx.worker_id:
            self.workers.add(self.ctx.worker_id)
        improved = self.note_best(r)
        if r.counted:
            self.since_improvement = 0 if improved else self.since_improvement + 1

    def tried(self) -> int:
        """Configs evaluated (the ones that count against the budget)."""
        return sum(1 for r in self.seen.values() if r.counted)

    def count_done(self) -> int:
        with self.ctx.Session() as s:
            self.done = repo.count_trials(s, self.ctx.job_id)
        return self.done

    def recorded_here(self, number: int) -> bool:
        """Whether trial `number` is recorded by this worker."""
        with self.ctx.Session() as s:
            return s.scalar(sa.select(Trial.worker).where(Trial.job_id == self.ctx.job_id, Trial.number == number)) \
                == self.ctx.worker_id

    def job_state(self) -> str | None:
        with self.ctx.Session() as s:
            return repo.job_state(s, self.ctx.job_id)

    # --- writing -------------------------------------------------------------------------------

    def store(self, r: Result, *, while_running: int | None = None) -> bool:
        """The trial's row, with the job's trials_done (db.repo.store_trial). `while_running`: the
        Optuna trial id of a shared job's trial, stored only while that trial is RUNNING, in one
        transaction (the job's row, then the trial's, locked first: a worker that fails the trial
        meanwhile waits for this one, and one that failed it first leaves it not RUNNING). False
        when it is not RUNNING any more: nothing was written."""
        with self.ctx.Session.begin() as s:
            if while_running is not None:
                repo.hold_job_row(s, self.ctx.job_id)
                if study_reads.trial_state(s, while_running, lock=True) != "RUNNING":
                    return False
            repo.store_trial(s, job_id=self.ctx.job_id, number=r.number, config=r.config, status=r.status,
                             samples_ms=r.samples_ms, median_ms=r.median_ms, spread=r.spread, error=r.error,
                             worker=self.ctx.worker_id)
        return True

    def update_job(self, *, trials_total: int | None, progress: float) -> None:
        with self.ctx.Session.begin() as s:
            repo.update_progress(s, self.ctx.job_id, trials_total=trials_total, progress=progress,
                                 best_time_ms=self.best.median_ms if self.best else None,
                                 best_config=self.best.config if self.best else None)

    def record_gpu(self, props: dict[str, Any]) -> None:
        with self.ctx.Session.begin() as s:
            repo.get_or_create_gpu(s, props)

    def publish(self, winner: Result, best_ms: float, default_ms: float | None, *, fingerprint: str,
                kernel_name: str, gpu_model: str, capability: str) -> bool:
        """The job succeeded with `winner`, which becomes the best config of its kernel, problem key and
        GPU model; False when the job is not running any more (cancelled, or finished by another
        worker sharing it: that worker's winner stands)."""
        with self.ctx.Session.begin() as s:
            if not repo.succeed_job(s, self.ctx.job_id, best_config=winner.config, best_time_ms=best_ms):
                return False
            repo.upsert_best_config(s, kernel_fingerprint=fingerprint, kernel_name=kernel_name,
                                    problem_key=canonical_key(self.ctx.spec.problem_key()), gpu_model=gpu_model,
                                    compute_capability=capability, config=winner.config, median_ms=best_ms,
                                    default_ms=default_ms, job_id=self.ctx.job_id)
        return True

    def fail(self, error: str) -> None:
        with self.ctx.Session.begin() as s:
            repo.finish_job(s, self.ctx.job_id, "failed", error=error)
