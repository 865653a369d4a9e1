"""Best configs: the launch-time lookup, listing, and publishing a locally tuned result."""
from __future__ import annotations

from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from db import repo
from db.models import BestConfig
from jobspec.model import PROBLEM_KEY
from jobspec.problem_key import canonical_key
from service.api import problem_key
from service.api.deps import PublishAuth, ReadAuth, SessionDep
from service.api.routing import StandardJSONRoute
from service.api.schemas import BestConfigOut, PublishIn
from service.fastpath import query_too_long

router = APIRouter(prefix="/configs", tags=["configs"], route_class=StandardJSONRoute)

NoNul = r"^[^\x00]*$"


def _parse_key(raw: str) -> dict:
    try:
        return problem_key.parse_problem_key(raw)
    except problem_key.InvalidProblemKey as exc:
        raise RequestValidationError([{"type": t, "loc": ("query", "key", *loc), "msg": reason, "input": None}
                                      for loc, reason, t in exc.errors]) from None


async def query_within_limit(request: Request) -> None:
    """414 for an over-long query string, before the parameters are validated (as the fast path)."""
    size, limit = len(request.scope.get("query_string", b"")), request.app.state.settings.lookup_max_query_bytes
    if size > limit:
        raise HTTPException(status.HTTP_414_URI_TOO_LONG, query_too_long(size, limit))


@router.get("/best", response_model=BestConfigOut,
            responses={404: {"description": "no tuned config fits"},
                       414: {"description": "the query string is over `lookup_max_query_bytes`"}})
async def best_config(
    request: Request,
    _: ReadAuth,
    __: Annotated[None, Depends(query_within_limit)],
    kernel: Annotated[str, Query(min_length=1, max_length=128, pattern=NoNul,
                                 description="kernel fingerprint, or kernel name")],
    gpu_model: Annotated[str, Query(min_length=1, max_length=200, pattern=NoNul)],
    key: Annotated[str, Query(max_length=4000, description='problem key values as a JSON object, e.g. {"n": 4096}',
                              json_schema_extra={"contentMediaType": "application/json",
                                                 "contentSchema": PROBLEM_KEY.json_schema()})] = "{}",
    compute_capability: Annotated[str | None, Query(max_length=16, pattern=r"^\d+\.\d+$")] = None,
) -> Response:
    """Best config for (kernel, key values, GPU model) with its match level:
    `exact`, else `compute_capability`, else `nearest_key`; 404 when nothing fits. Answered from
    memory (the config index), also while the database is unavailable."""
    code, body = request.app.state.config_index.answer(kernel, _parse_key(key), gpu_model, compute_capability)
    return Response(body, status_code=code, media_type="application/json")


@router.get("", response_model=list[BestConfigOut])
def list_configs(session: SessionDep, _: ReadAuth,
                 kernel: Annotated[str | None, Query(max_length=128, pattern=NoNul)] = None,
                 gpu_model: Annotated[str | None, Query(max_length=200, pattern=NoNul)] = None,
                 limit: Annotated[int, Query(ge=1, le=1000)] = 200,
                 offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0) -> list[BestConfigOut]:
    q = sa.select(BestConfig)
    if kernel:
        q = q.where(sa.or_(BestConfig.kernel_fingerprint == kernel, BestConfig.kernel_name == kernel))
    if gpu_model:
        q = q.where(BestConfig.gpu_model == gpu_model)
    rows = session.scalars(q.order_by(BestConfig.kernel_name, BestConfig.problem_key, BestConfig.gpu_model)
                           .limit(limit).offset(offset))
    return [BestConfigOut.of(b) for b in rows]


@router.post("", response_model=BestConfigOut,
             responses={503: {"description": "the database is unavailable: nothing to do but publish again later"}})
async def publish(body: PublishIn, request: Request, session: SessionDep, _: PublishAuth) -> BestConfigOut:
    """Record a config tuned by a client; an existing entry is replaced only by a faster one
    (atomically: of concurrent publishes of one entry, the fastest stays)."""
    # async, with the write alone in the thread pool: a sync route would also have FastAPI
    # validate its answer there, a second hand-over of the GIL the lookups on the event loop wait for
    return await run_in_threadpool(_write, request.app.state.config_index, session, body)


def _write(index, session: Session, body: PublishIn) -> BestConfigOut:
    """The publish's database work (in the thread pool), applied to the index in memory."""
    with index.writing():
        try:
            # versions of the table around the write let the index skip re-reading it (lookup.py)
            before = index.in_step(index.version(session))
            session.rollback()
            row = repo.upsert_best_config(session, kernel_fingerprint=body.kernel_fingerprint,
                                          kernel_name=body.kernel_name, problem_key=canonical_key(body.problem_key),
                                          gpu_model=body.gpu_model, compute_capability=body.compute_capability,
                                          config=body.config, median_ms=body.median_ms, default_ms=body.default_ms,
                                          policy="faster")
            session.commit()
        except OperationalError as exc:
            session.rollback()
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the database is unavailable"
                                f" ({type(exc).__name__}); publish again later (publishing twice is harmless)") from exc
        try:
            after = index.version(session)
            session.commit()       # ends the read: the session is closed on the event loop, no trip to the pool
        except OperationalError:   # stored all the same; the refresh thread will catch up (and the
            after = None           # session is closed in the pool: a rollback here would expire `row`)
        index.apply(row, before, after)    # this process's next lookup sees it
    return BestConfigOut.of(row)
