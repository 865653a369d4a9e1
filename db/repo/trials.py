"""Trials: every config a job evaluated, with its samples or its error, and the count against the
job's budget."""
from __future__ import annotations

import math
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import TRIAL_STATUSES, Job, Trial, TrialClaim, utcnow

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


def hold_job_row(session: Session, job_id: int) -> None:
    """Lock the job's row until the caller's transaction ends (an UPDATE: a row lock on PostgreSQL,
    the database's write lock on SQLite, taken before anything is read, so that what is read next
    is the latest). Storing a trial and claiming one take it first: one at a time per job."""
    session.execute(sa.update(Job).where(Job.id == job_id).values(updated_at=utcnow()))


def store_trial(session: Session, *, job_id: int, **trial) -> Trial:
    """`record_trial`, and `jobs.trials_done` set to the count of the job's counted trials, in the
    caller's transaction. The job's row is locked first (`hold_job_row`), so when two workers
    record at once the second one's count sees the first one's trial: trials_done always equals
    the recorded trials, also after the job has finished (a sharing worker's last trial)."""
    hold_job_row(session, job_id)
    t = record_trial(session, job_id=job_id, **trial)
    count = sa.select(sa.func.count()).select_from(Trial).where(counted_trials(job_id)).scalar_subquery()
    session.execute(sa.update(Job).where(Job.id == job_id).values(trials_done=count))
    return t


def claim_trial(session: Session, *, job_id: int, number: int, study_trial_id: int, worker: str | None,
                budget: int, running: sa.ColumnElement[bool]) -> bool:
    """Admit trial `number` (Optuna's `study_trial_id`) to the job's trial budget of `budget` trials, in
    the caller's transaction, after locking the job's row (`hold_job_row`): True when it fits, or
    was admitted already (a retry after an outage cut off the answer to the commit); False when the
    counted trials recorded plus the claimed trials in flight fill the budget. `running`: true of a
    claim whose trial is RUNNING in the study (Optuna's table, tuner/trial_claims.py) — a claim
    whose trial failed before its result holds no place."""
    hold_job_row(session, job_id)
    if session.scalar(sa.select(TrialClaim.id).where(TrialClaim.study_trial_id == study_trial_id)) is not None:
        return True
    recorded = sa.exists().where(Trial.job_id == job_id, Trial.number == TrialClaim.number)
    in_flight = (sa.select(sa.func.count()).select_from(TrialClaim)
                 .where(TrialClaim.job_id == job_id, running, ~recorded).scalar_subquery())
    counted = sa.select(sa.func.count()).select_from(Trial).where(counted_trials(job_id)).scalar_subquery()
    if int(session.scalar(sa.select(counted + in_flight)) or 0) >= budget:
        return False
    session.add(TrialClaim(job_id=job_id, number=number, study_trial_id=study_trial_id, worker=worker))
    session.flush()
    return True
