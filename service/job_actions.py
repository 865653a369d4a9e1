"""Cancelling and re-running a job: shared by the REST API and the dashboard's buttons."""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session, joinedload

from db.models import Job, utcnow


def find_job(session: Session, job_id: int) -> Job | None:
    return session.scalar(sa.select(Job).options(joinedload(Job.kernel)).where(Job.id == job_id))


def cancel_job(session: Session, job_id: int) -> tuple[Job | None, bool]:
    """Cancel a queued or running job (a worker running it stops after its current trial).
    Returns the job (None when there is none) and whether this call cancelled it."""
    now = utcnow()
    res = session.execute(sa.update(Job).where(Job.id == job_id, Job.state.in_(("queued", "running")))
                          .values(state="cancelled", finished_at=now, updated_at=now, lease_expires_at=None))
    session.commit()
    return find_job(session, job_id), res.rowcount == 1


def rerun_job(session: Session, job: Job) -> Job:
    """A new queued job with the same kernel, spec and GPU model (a fresh study: nothing of the
    old job's trials is reused). The spec was checked when the job was submitted."""
    now = utcnow()
    new = Job(kernel_id=job.kernel_id, gpu_model=job.gpu_model, spec=job.spec, state="queued", progress=0.0,
              trials_done=0, trials_total=job.trials_total, study_name="job-pending", created_at=now, updated_at=now)
    session.add(new)
    session.flush()
    new.study_name = f"job-{new.id}"
    session.commit()
    return find_job(session, new.id)
