"""Job claiming and leases: each operation atomic.

claim: on PostgreSQL `SELECT … FOR UPDATE SKIP LOCKED LIMIT 1` then an UPDATE of that row, in one
transaction (the row stays locked between them, and other claimers skip it); on SQLite the same
read, then an UPDATE that is a compare-and-set on the row as it was read (state, holder, lease):
the single writer runs it on fresh data, so a worker that read a job another one claimed since
updates nothing and reads again. A job is claimable when it is queued, or running with an expired
lease (every worker on it died or lost the database for longer than the lease), and its GPU model
is this worker's or unset. A CPU worker (the interpreter) takes jobs with no GPU model only while
no GPU worker is alive: where there are GPUs, such a job is tuned on one.

A claim and a release announce the job (db.job_wakeups): a claimed job is joinable by the other
workers of its GPU model, a released one claimable, and idle workers wake at once.
"""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from db import job_wakeups
from db.models import Gpu, Job, Worker, utcnow
from db.repo.hardware import alive_clause


@dataclass(frozen=True)
class Claim:
    job_id: int
    # the job was running and its lease had expired: whatever its Optuna study holds as RUNNING
    # belongs to workers that died (every worker on a job, a joiner too, renews its lease)
    reclaimed: bool = False
    previous_holder: str | None = None


def _claimable(now: dt.datetime, gpu_model: str, unpinned: bool):
    return sa.and_(
        sa.or_(Job.state == "queued", sa.and_(Job.state == "running", Job.lease_expires_at < now)),
        sa.or_(Job.gpu_model == gpu_model, Job.gpu_model.is_(None)) if unpinned else Job.gpu_model == gpu_model,
    )


def _same(column, value):
    return column.is_(None) if value is None else column == value


def gpu_worker_alive(engine: Engine, alive_seconds: float, *, cpu_model: str) -> bool:
    """Whether a GPU worker (not a CPU one: those register under the "GPU model" `cpu_model`,
    jobspec.device.INTERPRETER_MODEL) heartbeat within `alive_seconds` and did not stop."""
    q = (sa.select(Worker.id).join(Gpu, Worker.gpu_id == Gpu.id)
         .where(Gpu.model != cpu_model, alive_clause(alive_seconds)).limit(1))
    with engine.connect() as c:
        return c.execute(q).first() is not None


def claim(engine: Engine, worker_name: str, gpu_model: str, lease_seconds: float, *,
          unpinned: bool = True) -> Claim | None:
    """Claim the oldest claimable job for `gpu_model` (and, with `unpinned`, of those that name
    no GPU model), or None."""
    busy = 0
    while True:
        now = utcnow()
        pick = (sa.select(Job.id, Job.state, Job.claimed_by, Job.lease_expires_at)
                .where(_claimable(now, gpu_model, unpinned)).order_by(Job.created_at, Job.id).limit(1))
        if engine.dialect.name == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        try:
            with job_wakeups.begin(engine) as c:
                row = c.execute(pick).first()
                if row is None:
                    return None
                got = c.execute(
                    sa.update(Job)
                    .where(Job.id == row.id, Job.state == row.state, _same(Job.claimed_by, row.claimed_by),
                           _same(Job.lease_expires_at, row.lease_expires_at), _claimable(now, gpu_model, unpinned))
                    .values(state="running", claimed_by=worker_name,
                            lease_expires_at=now + dt.timedelta(seconds=lease_seconds),
                            started_at=sa.func.coalesce(Job.started_at, now),
                            gpu_model=sa.func.coalesce(Job.gpu_model, gpu_model), updated_at=now)
                    .returning(Job.id)).scalar_one_or_none()
                if got is not None:
                    # a running job: the other workers of its GPU model may join it now
                    job_wakeups.announce(c)
        except sa.exc.OperationalError:  # SQLite: busy beyond its timeout under contention
            busy += 1
            if engine.dialect.name != "sqlite" or busy == 20:
                raise
            time.sleep(0.01 * busy)
            continue
        if got is not None:
            return Claim(got, reclaimed=row.state == "running", previous_holder=row.claimed_by)
        # another worker claimed it between the read and the update (SQLite): read again


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


def renew_lease(engine: Engine, job_id: int, lease_seconds: float, holder: str | None = None) -> bool:
    """Extend the lease of a running job; False when the job is no longer running, or, with
    `holder`, when that worker no longer holds it (its lease expired and another worker claimed
    it). A worker that joined the job renews it without `holder`: its work keeps the job alive."""
    now = utcnow()
    cond = [Job.id == job_id, Job.state == "running"]
    if holder is not None:
        cond.append(Job.claimed_by == holder)
    with engine.begin() as c:
        r = c.execute(sa.update(Job).where(*cond).values(lease_expires_at=now + dt.timedelta(seconds=lease_seconds)))
    return r.rowcount > 0


def release_job(engine: Engine, job_id: int, worker_name: str) -> bool:
    """Give a running job back to the queue (graceful shutdown): only if this worker holds it."""
    now = utcnow()
    with job_wakeups.begin(engine) as c:
        r = c.execute(sa.update(Job).where(Job.id == job_id, Job.state == "running", Job.claimed_by == worker_name)
                      .values(state="queued", claimed_by=None, lease_expires_at=None, updated_at=now))
        if r.rowcount > 0:
            job_wakeups.announce(c)
    return r.rowcount > 0
