"""Response and request models of the REST API."""
from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SerializationInfo, model_serializer

from db.models import TOKEN_SCOPES, ApiToken, BestConfig, Gpu, Job, Kernel, Trial, Worker
from jobspec.model import ProblemKey
from service.core.json_input import encodable
from service.core.security import DEFAULT_SCOPES, scopes_text
from service.devices import INTERPRETER_MODEL, DeviceKind, device_kind


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


# a String(200) column; the pattern is for the document (the validator gives the clearer reason)
SafeStr = Annotated[str, Field(min_length=1, max_length=200, json_schema_extra={"pattern": r"^[^\x00]*$"}),
                    AfterValidator(_no_nul)]


class Out(BaseModel):
    """A response model. Input is refused when it is not valid Unicode (service.core.json_input),
    but a row stored before that (a lone surrogate in a published config) must not make every
    read of it fail: JSON answers carry U+FFFD in its place."""

    @model_serializer(mode="wrap")
    def _serialize(self, handler, info: SerializationInfo):
        data = handler(self)
        return encodable(data) if info.mode_is_json() else data


class ErrorOut(BaseModel):
    """Every error answer: what went wrong and what to do."""
    detail: str


class FieldError(BaseModel):
    field: str = Field(description='where: "body.config.BLOCK", "query.limit", "path.job_id", …')
    reason: str
    type: str = Field(description="the kind of error (pydantic's error type)")
    loc: list[str | int] = Field(description="`field` as a list")


class ValidationErrorOut(BaseModel):
    """A 422: each invalid field with the reason."""
    detail: list[FieldError]


class JobOut(Out):
    id: int
    state: str
    kernel_id: int
    kernel_name: str | None = None
    kernel_fingerprint: str | None = None
    gpu_model: str | None
    progress: float
    trials_done: int
    trials_total: int | None
    best_time_ms: float | None
    best_config: dict[str, Any] | None
    error: str | None
    idempotency_key: str | None
    study_name: str
    claimed_by: str | None
    lease_expires_at: dt.datetime | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    updated_at: dt.datetime
    spec: dict[str, Any] | None = None
    waiting_reason: str | None = Field(
        default=None, description="why the job does not start: set while it is queued (or running with an expired "
                                  "lease) and no live worker can take it, e.g. \"waiting for a worker with GPU model X; "
                                  "2 workers alive: A (model …), B (…)\"; null otherwise")

    @classmethod
    def of(cls, job: Job, *, with_spec: bool = True, waiting_reason: str | None = None) -> "JobOut":
        k = job.kernel
        return cls(id=job.id, state=job.state, kernel_id=job.kernel_id, kernel_name=k.name if k else None,
                   kernel_fingerprint=k.fingerprint if k else None, gpu_model=job.gpu_model,
                   progress=job.progress or 0.0, trials_done=job.trials_done or 0, trials_total=job.trials_total,
                   best_time_ms=job.best_time_ms, best_config=job.best_config, error=job.error,
                   idempotency_key=job.idempotency_key, study_name=job.study_name, claimed_by=job.claimed_by,
                   lease_expires_at=job.lease_expires_at, created_at=job.created_at, started_at=job.started_at,
                   finished_at=job.finished_at, updated_at=job.updated_at, spec=job.spec if with_spec else None,
                   waiting_reason=waiting_reason)


class JobPage(Out):
    items: list[JobOut]
    total: int
    limit: int
    offset: int


class TrialOut(Out):
    model_config = ConfigDict(from_attributes=True)
    id: int
    job_id: int
    number: int
    config: dict[str, Any]
    status: str
    samples_ms: list[Any] | None
    median_ms: float | None
    spread: dict[str, Any] | None
    error: str | None
    worker: str | None
    created_at: dt.datetime


class KernelOut(Out):
    id: int
    fingerprint: str
    name: str
    compiler_version: str
    created_at: dt.datetime
    jobs: int = 0
    source: str | None = None

    @classmethod
    def of(cls, k: Kernel, jobs: int = 0, with_source: bool = False) -> "KernelOut":
        return cls(id=k.id, fingerprint=k.fingerprint, name=k.name, compiler_version=k.compiler_version,
                   created_at=k.created_at, jobs=jobs, source=k.source if with_source else None)


class WorkerOut(Out):
    id: int
    name: str
    gpu_id: int | None
    gpu_model: str | None = Field(description=f'the GPU model it takes jobs for; "{INTERPRETER_MODEL}" for a CPU worker')
    kind: DeviceKind = Field(description='"gpu", or "cpu": the CPU interpreter (`blocktune worker --interpret`, '
                                         'or `blocktune serve` on a machine without a GPU)')
    device_index: int
    state: str
    started_at: dt.datetime
    last_heartbeat_at: dt.datetime | None
    alive: bool

    @classmethod
    def of(cls, w: Worker, alive: bool) -> "WorkerOut":
        model = w.gpu.model if w.gpu else None
        return cls(id=w.id, name=w.name, gpu_id=w.gpu_id, gpu_model=model, kind=device_kind(model),
                   device_index=w.device_index, state=w.state, started_at=w.started_at,
                   last_heartbeat_at=w.last_heartbeat_at, alive=alive)


class GpuOut(Out):
    """A GPU model workers registered, or the CPU interpreter (kind "cpu": no compute capability,
    SMs, GPU memory, driver or CUDA version)."""
    id: int
    model: str
    kind: DeviceKind
    compute_capability: str | None
    sm_count: int | None
    total_memory: int | None
    driver_version: str | None
    cuda_version: str | None
    workers: list[WorkerOut]
    alive_workers: int


class BestConfigOut(Out):
    kernel_fingerprint: str
    kernel_name: str
    problem_key: dict[str, Any]
    gpu_model: str
    compute_capability: str | None
    config: dict[str, Any]
    median_ms: float | None
    default_ms: float | None
    speedup: float | None
    match: str = "exact"
    job_id: int | None

    @classmethod
    def of(cls, b: BestConfig, match: str = "exact") -> "BestConfigOut":
        return cls(kernel_fingerprint=b.kernel_fingerprint, kernel_name=b.kernel_name,
                   problem_key=json.loads(b.problem_key), gpu_model=b.gpu_model,
                   compute_capability=b.compute_capability, config=b.config, median_ms=b.median_ms,
                   default_ms=b.default_ms, speedup=(b.default_ms / b.median_ms) if b.default_ms and b.median_ms else None,
                   match=match, job_id=b.job_id)


class PublishIn(BaseModel):
    """A best config tuned elsewhere (a client's local autotune), sent with BLOCKTUNE_PUBLISH=1."""
    # strict: JSON types as declared ("0.5" is no number), nothing converted on the way in
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    kernel_fingerprint: Annotated[SafeStr, Field(max_length=128)]   # kernels.fingerprint is a String(128)
    kernel_name: SafeStr
    problem_key: ProblemKey
    gpu_model: SafeStr
    compute_capability: Annotated[str, Field(max_length=16, pattern=r"^\d+\.\d+$")]
    config: dict[str, Annotated[int | float | str | bool | None, Field()]]
    median_ms: float = Field(gt=0, lt=1e9)
    default_ms: float | None = Field(default=None, gt=0, lt=1e9)


Scope = Literal[TOKEN_SCOPES]  # type: ignore[valid-type]


def _no_repeats(scopes: list[str]) -> list[str]:
    # the document says uniqueItems: a repeated scope is refused, not silently merged
    if len(set(scopes)) != len(scopes):
        raise ValueError("a scope is named twice")
    return scopes


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: SafeStr
    scopes: Annotated[list[Scope], AfterValidator(_no_repeats)] = Field(
        default_factory=lambda: sorted(DEFAULT_SCOPES), min_length=1, json_schema_extra={"uniqueItems": True},
        description=f"what the token may do; only scopes the creating token holds (default: {scopes_text(DEFAULT_SCOPES)})")


class TokenOut(Out):
    id: int
    name: str
    prefix: str
    scopes: list[Scope]
    created_at: dt.datetime
    revoked_at: dt.datetime | None
    last_used_at: dt.datetime | None
    token: str | None = None   # only in the answer to a creation

    @classmethod
    def of(cls, t: ApiToken, clear: str | None = None) -> "TokenOut":
        return cls(id=t.id, name=t.name, prefix=t.prefix, scopes=[s for s in TOKEN_SCOPES if s in t.scopes],
                   created_at=t.created_at, revoked_at=t.revoked_at,
                   last_used_at=t.last_used_at, token=clear)


def gpu_out(g: Gpu, alive_ids: set[int]) -> GpuOut:
    ws = [WorkerOut.of(w, w.id in alive_ids) for w in g.workers]
    common = dict(id=g.id, model=g.model, kind=device_kind(g.model), workers=ws, alive_workers=sum(w.alive for w in ws))
    if common["kind"] == "cpu":
        return GpuOut(**common, compute_capability=None, sm_count=None, total_memory=None, driver_version=None,
                      cuda_version=None)
    return GpuOut(**common, compute_capability=g.compute_capability, sm_count=g.sm_count,
                  total_memory=g.total_memory, driver_version=g.driver_version, cuda_version=g.cuda_version)
