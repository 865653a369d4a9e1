"""Job claiming and leases: one atomic statement per operation.

claim: `UPDATE jobs SET … WHERE id = (SELECT id … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id` on
PostgreSQL; the same `UPDATE … RETURNING` on SQLite, where the single statement holds the database's
write lock (the subquery's condition is repeated in the outer WHERE, so a statement that raced on
a stale snapshot updates nothing). A job is claimable when it is queued, or running with an expired
lease (its worker died), and its GPU model is this worker's or unset.
"""
from __future__ import annotations

import datetime as dt
import time

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from db.models import Job, utcnow


def _claimable(now: dt.datetime, gpu_model: str):
    return sa.and_(
        sa.or_(Job.state == "queued", sa.and_(Job.state == "running", Job.lease_expires_at < now)),
        sa.or_(Job.gpu_model == gpu_model, Job.gpu_model.is_(None)),
    )


def claim_job(engine: Engine, worker_name: str, gpu_model: str, lease_seconds: float) -> int | None:
    """Claim the oldest claimable job for `gpu_model`; returns its id, or None."""
    for attempt in range(20):
        now = utcnow()
        pick = sa.select(Job.id).where(_claimable(now, gpu_model)).order_by(Job.created_at, Job.id).limit(1)
        if engine.dialect.name == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        stmt = (sa.update(Job)
                .where(Job.id == pick.scalar_subquery(), _claimable(now, gpu_model))
                .values(state="running", claimed_by=worker_name,
                        lease_expires_at=now + dt.timedelta(seconds=lease_seconds),
                        started_at=sa.func.coalesce(Job.started_at, now),
                        gpu_model=sa.func.coalesce(Job.gpu_model, gpu_model), updated_at=now)
                .returning(Job.id))
        try:
            with engine.begin() as c:
                return c.execute(stmt).scalar_one_or_none()
        except sa.exc.OperationalError as exc:  # SQLite: stale snapshot / busy under contention
            if engine.dialect.name != "sqlite" or attempt == 19:
                raise
            time.sleep(0.01 * (attempt + 1))
    return None


def find_joinable_job(engine: Engine, worker_name: str, gpu_model: str) -> int | None:
    """A running job of this GPU model whose lease is alive and whose budget is not spent: another
    worker is on it, and this one may join (the Optuna study is shared)."""
    now = utcnow()
    q = (sa.select(Job.id).where(Job.state == "running", Job.gpu_model == gpu_model, Job.lease_expires_at >= now,
                                 sa.or_(Job.claimed_by.is_(None), Job.claimed_by != worker_name),
                                 sa.or_(Job.trials_total.is_(None), Job.trials_done < Job.trials_total))
         .order_by(Job.created_at, Job.id).limit(1))
    with engine.connect() as c:
        return c.execute(q).scalar_one_or_none()


def renew_lease(engine: Engine, job_id: int, lease_seconds: float) -> bool:
    """Extend the lease of a running job; False when the job is no longer running."""
    now = utcnow()
    with engine.begin() as c:
        r = c.execute(sa.update(Job).where(Job.id == job_id, Job.state == "running")
                      .values(lease_expires_at=now + dt.timedelta(seconds=lease_seconds)))
    return r.rowcount > 0


def release_job(engine: Engine, job_id: int, worker_name: str) -> bool:
    """Give a running job back to the queue (graceful shutdown): only if this worker holds it."""
    now = utcnow()
    with engine.begin() as c:
        r = c.execute(sa.update(Job).where(Job.id == job_id, Job.state == "running", Job.claimed_by == worker_name)
                      .values(state="queued", claimed_by=None, lease_expires_at=None, updated_at=now))
    return r.rowcount > 0
