"""Best configs: the winner per (kernel fingerprint, problem key, GPU model), written by tuning
jobs and by clients publishing what they tuned themselves."""
from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import BestConfig, utcnow
from db.repo.trials import finite

UPSERT_POLICIES = ("latest", "faster")


def upsert_best_config(session: Session, *, kernel_fingerprint: str, kernel_name: str, problem_key: str,
                       gpu_model: str, compute_capability: str, config: dict[str, Any], median_ms: float,
                       default_ms: float | None = None, job_id: int | None = None,
                       policy: str = "latest") -> BestConfig:
    """Store a best config for (kernel fingerprint, problem key, GPU model); returns the row as stored.

    One atomic INSERT … ON CONFLICT DO UPDATE on both SQLite and PostgreSQL, so concurrent writers
    of the same entry cannot lose each other's result. `policy` says which result an existing
    entry keeps:
      "latest"  the new one (a tuning job's winner: the job measured the previous winner too — it
                is enqueued first — so its choice was made knowing it)
      "faster"  the new one only when its median is lower (a result published by a client, measured
                elsewhere: the comparison is all there is); a missing default_ms keeps the stored one
    """
    if policy not in UPSERT_POLICIES:
        raise ValueError(f"unknown upsert policy {policy!r} (one of {', '.join(UPSERT_POLICIES)})")
    values = dict(kernel_fingerprint=kernel_fingerprint, kernel_name=kernel_name, problem_key=problem_key,
                  gpu_model=gpu_model, compute_capability=compute_capability, config=config,
                  median_ms=float(median_ms), default_ms=finite(default_ms), job_id=job_id, updated_at=utcnow())
    stmt = _upsert_statement(session.get_bind().dialect.name, policy)
    row = session.scalars(stmt, values, execution_options={"populate_existing": True}).first()
    if row is None:  # "faster" and the stored entry is at least as fast: it stays, and is the answer
        row = session.scalars(sa.select(BestConfig).where(
            BestConfig.kernel_fingerprint == kernel_fingerprint, BestConfig.problem_key == problem_key,
            BestConfig.gpu_model == gpu_model).execution_options(populate_existing=True)).one()
    return row


@functools.cache
def _upsert_statement(dialect: str, policy: str):
    """The upsert of one row for `dialect` and `policy`, its values bound at execution: built once
    (building it, `excluded` columns and all, cost more Python than the rest of a publish; its
    compiled form is cached by SQLAlchemy either way)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:  # pragma: no cover - only SQLite and PostgreSQL are supported
        raise NotImplementedError(dialect)
    stmt = insert(BestConfig)
    new = stmt.excluded
    table = BestConfig.__table__.c
    if policy == "latest":
        update = {k: new[k] for k in ("kernel_name", "compute_capability", "config", "median_ms",
                                      "default_ms", "job_id", "updated_at")}
        where = None
    else:
        update = {k: new[k] for k in ("compute_capability", "config", "median_ms", "job_id", "updated_at")}
        update["default_ms"] = sa.func.coalesce(new.default_ms, table.default_ms)
        where = new.median_ms < table.median_ms
    return stmt.on_conflict_do_update(index_elements=["kernel_fingerprint", "problem_key", "gpu_model"],
                                      set_=update, where=where).returning(BestConfig)


def get_best_config(session: Session, *, kernel_fingerprint: str, problem_key: str,
                    gpu_model: str) -> BestConfig | None:
    return session.scalars(sa.select(BestConfig).where(
        BestConfig.kernel_fingerprint == kernel_fingerprint, BestConfig.problem_key == problem_key,
        BestConfig.gpu_model == gpu_model)).first()


def find_best_configs(session: Session, *, kernel_name: str | None = None, kernel_fingerprint: str | None = None,
                      problem_key: str | None = None, gpu_model: str | None = None,
                      limit: int = 100) -> list[BestConfig]:
    q = sa.select(BestConfig)
    if kernel_name is not None:
        q = q.where(BestConfig.kernel_name == kernel_name)
    if kernel_fingerprint is not None:
        q = q.where(BestConfig.kernel_fingerprint == kernel_fingerprint)
    if problem_key is not None:
        q = q.where(BestConfig.problem_key == problem_key)
    if gpu_model is not None:
        q = q.where(BestConfig.gpu_model == gpu_model)
    return list(session.scalars(q.order_by(BestConfig.updated_at.desc()).limit(limit)))
