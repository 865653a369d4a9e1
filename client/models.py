"""Typed results returned by the client (pydantic models mirroring the service's JSON)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Job(_Model):
    id: int
    state: str
    kernel_id: int | None = None
    kernel_name: str | None = None
    kernel_fingerprint: str | None = None
    gpu_model: str | None = None
    progress: float = 0.0
    trials_done: int = 0
    trials_total: int | None = None
    best_time_ms: float | None = None
    best_config: dict[str, Any] | None = None
    error: str | None = None
    idempotency_key: str | None = None
    claimed_by: str | None = None
    lease_expires_at: datetime | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None
    spec: dict[str, Any] | None = None
    # set while no live worker can take the job: what it waits for and which workers are alive
    waiting_reason: str | None = None

    @property
    def done(self) -> bool:
        return self.state in ("succeeded", "failed", "cancelled")


class JobPage(_Model):
    items: list[Job]
    total: int
    limit: int
    offset: int


class Trial(_Model):
    id: int
    job_id: int
    number: int
    config: dict[str, Any]
    status: str
    samples_ms: list[float] | None = None
    median_ms: float | None = None
    spread: Any = None
    error: str | None = None
    worker: str | None = None
    created_at: datetime | None = None


class BestConfig(_Model):
    kernel_fingerprint: str
    kernel_name: str
    problem_key: dict[str, Any]
    gpu_model: str
    compute_capability: str | None = None
    config: dict[str, Any]
    median_ms: float | None = None
    default_ms: float | None = None
    speedup: float | None = None
    match: str
    job_id: int | None = None


class Kernel(_Model):
    id: int
    fingerprint: str
    name: str
    compiler_version: str | None = None
    created_at: datetime | None = None
    jobs: int = 0


class Gpu(_Model):
    id: int
    model: str
    compute_capability: str | None = None
    sm_count: int | None = None
    total_memory: int | None = None
    workers: list[dict[str, Any]] = []
    alive_workers: int = 0
