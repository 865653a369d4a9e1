"""Trials: every config a job evaluated, with its samples or its error, and the count against the
job's budget."""
from __future__ import annotations

import math
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import TRIAL_STATUSES, Job, Trial, utcnow

# a trial refused by a constraint of the search space is recorded (status "invalid", its error
# starting with this) but does not count against the trial budget; every other trial does
UNCOUNTED_ERROR_PREFIX = "constraint violated: "


def counted_trials(job_id):
    """WHERE clause of the job's trials that count against its budget (`jobs.trials_done`)."""
    return sa.and_(Trial.job_id == job_id,
                   sa.or_(Trial.status != "invalid", Trial.error.is_(None),
                          ~Trial.error.startswith(UNCOUNTED_ERROR_PREFIX)))


def count_trials(session: Session, job_id: int) -> int:
    return int(session.scalar(sa.select(sa.func.count()).select_from(Trial).where(counted_trials(job_id))) or 0)


def finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def record_trial(session: Session, *, job_id: int, number: int, config: dict[str, Any], status: str,
                 samples_ms: Iterable[float] = (), median_ms: float | None = None,
                 spread: dict[str, float] | None = None, error: str | None = None,
                 worker: str | None = None) -> Trial:
    """Insert or replace the trial (job_id, number)."""
    if status not in TRIAL_STATUSES:
        raise ValueError(f"unknown trial status {status!r}")
    values = dict(config=config, status=status, samples_ms=[float(s) for s in samples_ms],
                  median_ms=finite(median_ms), spread=spread, error=error, worker=worker)
    t = session.scalars(sa.select(Trial).where(Trial.job_id == job_id, Trial.number == number)).first()
    if t is None:
        t = Trial(job_id=job_id, number=number, **values)
        session.add(t)
    else:
        for k, v in values.items():
            setattr(t, k, v)
    session.flush()
    return t


def store_trial(session: Session, *, job_id: int, **trial) -> Trial:
    """`record_trial`, and `jobs.trials_done` set to the count of the job's counted trials, in the
    caller's transaction. The job's row is locked first (an UPDATE: a row lock on PostgreSQL, the
    write lock on SQLite), so when two workers record at once the second one's count sees the
    first one's trial: trials_done always equals the recorded trials, also after the job has
    finished (a sharing worker's last trial)."""
    session.execute(sa.update(Job).where(Job.id == job_id).values(updated_at=utcnow()))
    t = record_trial(session, job_id=job_id, **trial)
    count = sa.select(sa.func.count()).select_from(Trial).where(counted_trials(job_id)).scalar_subquery()
    session.execute(sa.update(Job).where(Job.id == job_id).values(trials_done=count))
    return t



