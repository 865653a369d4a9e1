"""Cancelling and re-running a job: shared by the REST API and the dashboard's buttons (the
writes are db.repo's)."""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session, joinedload

from db import repo
from db.models import Job


def find_job(session: Session, job_id: int) -> Job | None:
    return session.scalar(sa.select(Job).options(joinedload(Job.kernel)).where(Job.id == job_id))


def cancel_job(session: Session, job_id: int) -> tuple[Job | None, bool]:
    """Cancel a queued or running job (a worker running it stops after its current trial).
    Returns the job (None when there is none) and whether this call cancelled it."""
    cancelled = repo.finish_job(session, job_id, "cancelled")
    session.commit()
    return find_job(session, job_id), cancelled


def rerun_job(session: Session, job: Job) -> Job:
    """A new queued job with the same kernel, spec and GPU model (a fresh study: nothing of the
    old job's trials is reused). The spec was checked when the job was submitted."""
    new = repo.create_job(session, job.kernel, job.spec, gpu_model=job.gpu_model, trials_total=job.trials_total)
    session.commit()
    return find_job(session, new.id)
