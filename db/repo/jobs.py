"""Jobs: submitted (with their kernel), started by the tuner, their progress, and how they end.

A job's state only moves forward: queued → running → succeeded | failed | cancelled (a running
job goes back to queued only when its worker gives it back: claims.py). No function here overrides
a final state: a job cancelled while a worker finishes it stays cancelled.
"""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.job_wakeups import announce
from db.models import JOB_FINAL_STATES, Job, Kernel, Trial, utcnow
from db.repo.trials import counted_trials


def get_or_create_kernel(session: Session, *, fingerprint: str, name: str, source: str,
                         compiler_version: str) -> Kernel:
    k = session.scalars(sa.select(Kernel).where(Kernel.fingerprint == fingerprint)).first()
    if k is not None:
        return k
    k = Kernel(fingerprint=fingerprint, name=name, source=source, compiler_version=compiler_version)
    try:
        with session.begin_nested():
            session.add(k)
    except sa.exc.IntegrityError:
        k = session.scalars(sa.select(Kernel).where(Kernel.fingerprint == fingerprint)).one()
    return k


def create_job(session: Session, kernel: Kernel, spec: dict[str, Any], *, gpu_model: str | None = None,
               idempotency_key: str | None = None, trials_total: int | None = None) -> Job:
    """A queued job; its Optuna study is named `job-<id>`. Flushes to get the id (an
    idempotency key used before raises IntegrityError). Idle workers are woken when the session
    commits (db.job_wakeups)."""
    job = Job(kernel=kernel, spec=spec, gpu_model=gpu_model, idempotency_key=idempotency_key,
              trials_total=trials_total, state="queued", progress=0.0, trials_done=0, study_name="")
    session.add(job)
    session.flush()
    job.study_name = f"job-{job.id}"
    session.flush()
    announce(session)
    return job


def submit_job(session: Session, *, fingerprint: str, kernel_name: str, source: str, compiler_version: str,
               spec: dict[str, Any], gpu_model: str | None = None, idempotency_key: str | None = None,
               trials_total: int | None = None) -> Job:
    """A queued job for a checked spec (tuner.submission.prepare_submission: the API and `blocktune
    tune` alike), its kernel registered on first use."""
    kernel = get_or_create_kernel(session, fingerprint=fingerprint, name=kernel_name, source=source,
                                  compiler_version=compiler_version)
    return create_job(session, kernel, spec, gpu_model=gpu_model, idempotency_key=idempotency_key,
                      trials_total=trials_total)


def job_state(session: Session, job_id: int) -> str | None:
    return session.scalar(sa.select(Job.state).where(Job.id == job_id).execution_options(populate_existing=True))


def start_job(session: Session, job_id: int, *, worker: str | None = None) -> Job | None:
    """Mark the job running for a tuner run (started now unless it was before; held by `worker`
    unless a worker holds it already); None when it has a final state. LookupError: no such job."""
    job = session.get(Job, job_id)
    if job is None:
        raise LookupError(f"no job {job_id}")
    if job.state in JOB_FINAL_STATES:
        return None
    now = utcnow()
    job.state = "running"
    job.study_name = job.study_name or f"job-{job.id}"
    job.started_at = job.started_at or now
    job.updated_at = now
    if worker and not job.claimed_by:
        job.claimed_by = worker
    return job


def update_progress(session: Session, job_id: int, *, trials_total: int | None, progress: float,
                    best_time_ms: float | None = None, best_config: dict[str, Any] | None = None) -> None:
    """A running job's progress and best result so far (`trials_done` is not written here: storing a
    trial keeps it equal to the recorded trials, trials.store_trial)."""
    values: dict[str, Any] = dict(trials_total=trials_total, progress=progress, updated_at=utcnow())
    if best_config is not None:
        values.update(best_time_ms=best_time_ms, best_config=best_config)
    session.execute(sa.update(Job).where(Job.id == job_id, Job.state == "running").values(**values))


def succeed_job(session: Session, job_id: int, *, best_config: dict[str, Any], best_time_ms: float) -> bool:
    """Finish a running job with its winner; False when it is not running any more (cancelled, or
    finished by another worker sharing it: that worker's winner stands)."""
    now = utcnow()
    done = sa.select(sa.func.count()).select_from(Trial).where(counted_trials(job_id)).scalar_subquery()
    res = session.execute(sa.update(Job).where(Job.id == job_id, Job.state == "running").values(
        best_config=best_config, best_time_ms=best_time_ms, progress=1.0, trials_done=done, state="succeeded",
        finished_at=now, updated_at=now, lease_expires_at=None, error=None))
    return res.rowcount == 1


def finish_job(session: Session, job_id: int, state: str, *, error: str | None = None,
               only_if_running: bool = False) -> bool:
    """Set a final state (failed, cancelled) unless the job already has one; with `only_if_running`,
    only a running job (a worker failing the job it ran, which may have been given back meanwhile).
    True if set."""
    assert state in JOB_FINAL_STATES
    now = utcnow()
    where = Job.state == "running" if only_if_running else Job.state.not_in(JOB_FINAL_STATES)
    res = session.execute(sa.update(Job).where(Job.id == job_id, where)
                          .values(state=state, error=error, finished_at=now, updated_at=now, lease_expires_at=None))
    return res.rowcount == 1
