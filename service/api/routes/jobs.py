"""Tuning jobs: submit (idempotent), list, get, cancel, trials."""
from __future__ import annotations

from typing import Annotated, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Header, HTTPException, Path, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from sqlalchemy.orm import Session, joinedload

from db import repo
from db.models import Job, Kernel, Trial
from jobspec.model import JobSpec
from service import job_actions
from service.api.deps import ReadAuth, SessionDep, SettingsDep, SubmitAuth
from service.api.routing import StandardJSONRoute
from service.api.schemas import JobOut, JobPage, TrialOut
from service.kernel_check import CheckerBusy, CheckRejected
from service.waiting import waiting_reasons
from tuner.submission import Submission

router = APIRouter(prefix="/jobs", tags=["jobs"], route_class=StandardJSONRoute)

JobId = Annotated[int, Path(ge=1, le=2**31 - 1)]
State = Literal["queued", "running", "succeeded", "failed", "cancelled"]


def _out(session: Session, settings, job: Job, **kw) -> JobOut:
    """A job as answered, with why it waits when no live worker can take it."""
    reason = waiting_reasons(session, settings.worker_alive_seconds, [job]).get(job.id)
    return JobOut.of(job, waiting_reason=reason, **kw)


def _get_job(session: Session, job_id: int) -> Job:
    job = job_actions.find_job(session, job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id}")
    return job


@router.post("", response_model=JobOut, status_code=status.HTTP_201_CREATED,
             responses={200: {"description": "a job with this Idempotency-Key already exists (returned)"},
                        409: {"description": "the Idempotency-Key was used for another spec"},
                        422: {"description": "invalid spec, or a kernel source the compiler rejects (also when its "
                                             "check exceeds its CPU-time, memory or time limit)"},
                        503: {"description": "every kernel checker is busy: retry after the Retry-After header's seconds"}})
async def submit_job(
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    _: SubmitAuth,
    spec: JobSpec,
    idempotency_key: Annotated[str | None, Header(max_length=200, pattern=r"^[\x21-\x7e]+$")] = None,
    gpu_model: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]+$",
                                           description="tune on this GPU model only (default: the first worker's)")] = None,
) -> JobOut:
    """Submit a tuning job: a job spec (`JobSpec`, the model `blocktune submit` and the tuner use).
    The kernel source is only parsed and checked by blocktune's compiler (never executed), in a
    checker process with CPU-time, memory and time limits; expressions only go through the safe
    evaluator."""
    if idempotency_key:
        existing = await run_in_threadpool(_by_idempotency_key, session, idempotency_key)
        if existing is not None:
            return await run_in_threadpool(_replay, session, settings, existing, spec, gpu_model, response)
    # the check may take seconds: no database connection (or SQLite read transaction) waits with it
    await run_in_threadpool(session.close)
    try:   # awaited here: neither the event loop nor a threadpool thread waits on the check
        sub = await request.app.state.kernel_checker.check(spec.to_json())
    except CheckRejected as exc:
        raise RequestValidationError([{"type": e["type"], "loc": ("body", *e["loc"]), "msg": e["msg"], "input": None}
                                      for e in exc.errors])
    except CheckerBusy as exc:
        raise HTTPException(503, str(exc), headers={"Retry-After": str(exc.retry_after)})
    return await run_in_threadpool(_store, session, settings, sub, spec, idempotency_key, gpu_model, response)


def _by_idempotency_key(session: Session, key: str) -> Job | None:
    return session.scalar(sa.select(Job).options(joinedload(Job.kernel)).where(Job.idempotency_key == key))


def _store(session: Session, settings, sub: Submission, spec: JobSpec, idempotency_key: str | None, gpu_model: str | None,
           response: Response) -> JobOut:
    try:
        job = repo.submit_job(session, fingerprint=sub.fingerprint, kernel_name=sub.kernel_name, source=sub.source,
                              compiler_version=sub.compiler_version, spec=sub.spec, gpu_model=gpu_model,
                              idempotency_key=idempotency_key, trials_total=sub.trials_total)
        session.commit()
    except sa.exc.IntegrityError:       # the same idempotency key, submitted concurrently
        session.rollback()
        existing = session.scalar(sa.select(Job).options(joinedload(Job.kernel))
                                  .where(Job.idempotency_key == idempotency_key)) if idempotency_key else None
        if existing is None:
            raise HTTPException(409, "conflicting concurrent submission; retry")
        return _replay(session, settings, existing, spec, gpu_model, response)
    session.refresh(job)
    return _out(session, settings, job)


def _replay(session: Session, settings, existing: Job, spec: JobSpec, gpu_model: str | None,
            response: Response) -> JobOut:
    same = spec.to_json() == existing.spec and (gpu_model is None or gpu_model == existing.gpu_model)
    if not same:
        raise HTTPException(409, "this Idempotency-Key was already used for a different job spec")
    response.status_code = status.HTTP_200_OK
    return _out(session, settings, existing)


@router.get("", response_model=JobPage)
def list_jobs(session: SessionDep, settings: SettingsDep, _: ReadAuth,
              state: State | None = None,
              kernel: Annotated[str | None, Query(max_length=128, pattern=r"^[^\x00]*$",
                                                  description="kernel name or fingerprint")] = None,
              gpu_model: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$")] = None,
              limit: Annotated[int, Query(ge=1, le=500)] = 50,
              offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0) -> JobPage:
    q = sa.select(Job)
    if state:
        q = q.where(Job.state == state)
    if kernel:
        q = q.join(Kernel).where(sa.or_(Kernel.name == kernel, Kernel.fingerprint == kernel))
    if gpu_model:
        q = q.where(Job.gpu_model == gpu_model)
    total = session.scalar(sa.select(sa.func.count()).select_from(q.subquery())) or 0
    rows = list(session.scalars(q.options(joinedload(Job.kernel)).order_by(Job.id.desc()).limit(limit).offset(offset)))
    reasons = waiting_reasons(session, settings.worker_alive_seconds, rows)
    return JobPage(items=[JobOut.of(j, with_spec=False, waiting_reason=reasons.get(j.id)) for j in rows],
                   total=total, limit=limit, offset=offset)


@router.get("/{job_id}", response_model=JobOut, responses={404: {"description": "no such job"}})
def get_job(job_id: JobId, session: SessionDep, settings: SettingsDep, _: ReadAuth) -> JobOut:
    """A job with its progress (trials done / budget), the best config so far, and, while no live
    worker can take it, why it waits (`waiting_reason`)."""
    return _out(session, settings, _get_job(session, job_id))


@router.post("/{job_id}/cancel", response_model=JobOut,
             responses={404: {"description": "no such job"}, 409: {"description": "the job is already finished"}})
def cancel_job(job_id: JobId, session: SessionDep, _: SubmitAuth) -> JobOut:
    """Cancel a queued or running job (a worker running it stops after its current trial)."""
    job, _cancelled = job_actions.cancel_job(session, job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id}")
    if job.state != "cancelled":
        raise HTTPException(409, f"job {job_id} is already {job.state}")
    return JobOut.of(job)


@router.post("/{job_id}/rerun", response_model=JobOut, status_code=status.HTTP_201_CREATED,
             responses={404: {"description": "no such job"}})
def rerun_job(job_id: JobId, session: SessionDep, _: SubmitAuth) -> JobOut:
    """Submit the job's spec again, for the same GPU model: a new queued job with a new study."""
    return JobOut.of(job_actions.rerun_job(session, _get_job(session, job_id)))


@router.get("/{job_id}/trials", response_model=list[TrialOut], responses={404: {"description": "no such job"}})
def job_trials(job_id: JobId, session: SessionDep, _: ReadAuth,
               status_: Annotated[Literal["ok", "compile-error", "runtime-error", "wrong-result", "timeout", "invalid"] | None,
                                  Query(alias="status")] = None) -> list[TrialOut]:
    _get_job(session, job_id)
    q = sa.select(Trial).where(Trial.job_id == job_id)
    if status_:
        q = q.where(Trial.status == status_)
    return [TrialOut.model_validate(t) for t in session.scalars(q.order_by(Trial.number))]
