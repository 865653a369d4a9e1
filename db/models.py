"""SQLAlchemy 2.x typed models of blocktune's database.

Table and column names are a contract (docs/contracts.md): the service and the tuner both use them.
All datetimes are timezone-aware UTC (stored as such on PostgreSQL; normalized to UTC on SQLite,
which has no time zones). Enumerations are strings checked by named CHECK constraints.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
JOB_FINAL_STATES = ("succeeded", "failed", "cancelled")
TRIAL_STATUSES = ("ok", "compile-error", "runtime-error", "wrong-result", "timeout", "invalid")
WORKER_STATES = ("idle", "busy", "stopped")
TOKEN_SCOPES = ("read", "publish", "submit", "admin")

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class UTCDateTime(sa.types.TypeDecorator):
    """A timezone-aware datetime that always comes back in UTC, also from SQLite."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: blocktune stores timezone-aware UTC datetimes")
        value = value.astimezone(dt.timezone.utc)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: dt.datetime | None, dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc)


class ScopeSet(sa.types.TypeDecorator):
    """A set of API token scopes (TOKEN_SCOPES), stored as their names in TOKEN_SCOPES order separated
    by spaces ("read publish"): readable in psql, one value per set, and no scope outside the list."""

    impl = sa.String(64)
    cache_ok = True

    def process_bind_param(self, value, dialect) -> str | None:
        if value is None:
            return None
        if isinstance(value, str):
            raise TypeError("token scopes are a set of names, not a string")
        unknown = set(value) - set(TOKEN_SCOPES)
        if unknown:
            raise ValueError(f"unknown token scope(s) {sorted(unknown)}: the scopes are {', '.join(TOKEN_SCOPES)}")
        return " ".join(s for s in TOKEN_SCOPES if s in value)

    def process_result_value(self, value: str | None, dialect) -> frozenset[str] | None:
        return None if value is None else frozenset(value.split())


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        dt.datetime: UTCDateTime(),
        dict[str, Any]: sa.JSON(),
        list[Any]: sa.JSON(),
        Any: sa.JSON(),
    }


class Gpu(Base):
    __tablename__ = "gpus"
    __table_args__ = (sa.UniqueConstraint("model", "compute_capability"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(sa.String(200))           # as the driver reports it
    compute_capability: Mapped[str] = mapped_column(sa.String(16))  # "9.0"
    sm_count: Mapped[int]
    total_memory: Mapped[int] = mapped_column(sa.BigInteger)     # bytes
    driver_version: Mapped[str] = mapped_column(sa.String(64))
    cuda_version: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    workers: Mapped[list["Worker"]] = relationship(back_populates="gpu")


class Worker(Base):
    __tablename__ = "workers"
    __table_args__ = (sa.CheckConstraint(_in("state", WORKER_STATES), name="state"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)  # "<host>-gpu0"
    gpu_id: Mapped[int | None] = mapped_column(sa.ForeignKey("gpus.id"))
    device_index: Mapped[int] = mapped_column(default=0)
    state: Mapped[str] = mapped_column(sa.String(16), default="idle")
    started_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_heartbeat_at: Mapped[dt.datetime | None]

    gpu: Mapped[Gpu | None] = relationship(back_populates="workers")


class Kernel(Base):
    __tablename__ = "kernels"

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(sa.String(128), unique=True)
    name: Mapped[str] = mapped_column(sa.String(200))
    source: Mapped[str] = mapped_column(sa.Text)
    compiler_version: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    jobs: Mapped[list["Job"]] = relationship(back_populates="kernel")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        sa.CheckConstraint(_in("state", JOB_STATES), name="state"),
        sa.Index("ix_jobs_state_gpu_model", "state", "gpu_model"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kernel_id: Mapped[int] = mapped_column(sa.ForeignKey("kernels.id"), index=True)
    gpu_model: Mapped[str | None] = mapped_column(sa.String(200))  # null = any GPU
    spec: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(sa.String(16), default="queued")
    progress: Mapped[float] = mapped_column(default=0.0)             # 0..1
    trials_done: Mapped[int] = mapped_column(default=0)
    trials_total: Mapped[int | None]
    best_time_ms: Mapped[float | None]
    best_config: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    error: Mapped[str | None] = mapped_column(sa.Text)
    idempotency_key: Mapped[str | None] = mapped_column(sa.String(200), unique=True)
    study_name: Mapped[str] = mapped_column(sa.String(200))
    claimed_by: Mapped[str | None] = mapped_column(sa.String(200))   # worker name
    lease_expires_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    kernel: Mapped[Kernel] = relationship(back_populates="jobs")
    trials: Mapped[list["Trial"]] = relationship(back_populates="job", order_by="Trial.number",
                                                 cascade="all, delete-orphan", passive_deletes=True)


class Trial(Base):
    __tablename__ = "tuning_trials"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "number"),
        sa.CheckConstraint(_in("status", TRIAL_STATUSES), name="status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(sa.ForeignKey("jobs.id", ondelete="CASCADE"))
    number: Mapped[int]                                    # Optuna trial number
    config: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(sa.String(16))
    samples_ms: Mapped[list[Any]] = mapped_column(sa.JSON, default=list)
    median_ms: Mapped[float | None]
    spread: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)  # {"p20","p80","min","max"}
    error: Mapped[str | None] = mapped_column(sa.Text)
    worker: Mapped[str | None] = mapped_column(sa.String(200))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    job: Mapped[Job] = relationship(back_populates="trials")


class TrialClaim(Base):
    """A trial of a shared job's Optuna study admitted to the trial budget: a worker sharing the job
    claims its trial before measuring its config (tuner/trial_claims.py). A claim counts against the
    budget while its trial is recorded in `tuning_trials` or RUNNING in the study; a trial failed
    before its result (its worker died or stopped; the config is re-queued) frees its claim by
    leaving RUNNING, without a write."""

    __tablename__ = "trial_claims"
    __table_args__ = (sa.UniqueConstraint("job_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(sa.ForeignKey("jobs.id", ondelete="CASCADE"))
    number: Mapped[int]                                    # Optuna trial number
    study_trial_id: Mapped[int] = mapped_column(unique=True)   # Optuna's trial_id (its `trials` table)
    worker: Mapped[str | None] = mapped_column(sa.String(200))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class BestConfig(Base):
    __tablename__ = "best_configs"
    __table_args__ = (sa.UniqueConstraint("kernel_fingerprint", "problem_key", "gpu_model"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    kernel_fingerprint: Mapped[str] = mapped_column(sa.String(128))
    kernel_name: Mapped[str] = mapped_column(sa.String(200))
    problem_key: Mapped[str] = mapped_column(sa.Text)      # canonical JSON, sorted keys
    gpu_model: Mapped[str] = mapped_column(sa.String(200))
    compute_capability: Mapped[str] = mapped_column(sa.String(16))
    config: Mapped[dict[str, Any]]                         # constexprs + num_warps + num_stages
    median_ms: Mapped[float]
    default_ms: Mapped[float | None]
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("jobs.id", ondelete="SET NULL"))
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)  # sha256 hex
    prefix: Mapped[str] = mapped_column(sa.String(16))
    # what the token may do (service.api.deps enforces it per endpoint); no database default:
    # every token states its scopes (migration 0002 gave the tokens before it read publish submit)
    scopes: Mapped[frozenset[str]] = mapped_column(ScopeSet())
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[dt.datetime | None]
    last_used_at: Mapped[dt.datetime | None]

    sessions: Mapped[list["DashboardSession"]] = relationship(back_populates="token", passive_deletes=True)


class DashboardSession(Base):
    """A dashboard login: the browser's cookie holds a random id whose sha256 is stored here, never
    the API token it was opened with. It ends at `expires_at`, at logout (row deleted), or when
    its token is revoked (rows deleted, and a revoked token's sessions never count)."""

    __tablename__ = "dashboard_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    session_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)  # sha256 hex of the cookie's id
    token_id: Mapped[int] = mapped_column(sa.ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[dt.datetime]

    token: Mapped[ApiToken] = relationship(back_populates="sessions")
