"""Best configs: the launch-time lookup, listing, and publishing a locally tuned result."""
from __future__ import annotations

import json
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError

from db.models import BestConfig, utcnow
from service.api import problem_key
from service.api.deps import ReadAuth, SessionDep, WriteAuth
from service.api.routing import StandardJSONRoute
from service.api.schemas import BestConfigOut, PublishIn, canonical_key

router = APIRouter(prefix="/configs", tags=["configs"], route_class=StandardJSONRoute)

NoNul = r"^[^\x00]*$"


def _parse_key(raw: str) -> dict:
    try:
        return problem_key.parse_problem_key(raw)
    except problem_key.InvalidProblemKey as exc:
        raise RequestValidationError([{"type": t, "loc": ("query", "key", *loc), "msg": reason, "input": None}
                                      for loc, reason, t in exc.errors]) from None


@router.get("/best", response_model=BestConfigOut, responses={404: {"description": "no tuned config fits"}})
async def best_config(
    request: Request,
    _: ReadAuth,
    kernel: Annotated[str, Query(min_length=1, max_length=128, pattern=NoNul,
                                 description="kernel fingerprint, or kernel name")],
    gpu_model: Annotated[str, Query(min_length=1, max_length=200, pattern=NoNul)],
    key: Annotated[str, Query(max_length=4000, description='problem key values as a JSON object, e.g. {"n": 4096}',
                              json_schema_extra={"contentMediaType": "application/json",
                                                 "contentSchema": problem_key.JSON_SCHEMA})] = "{}",
    compute_capability: Annotated[str | None, Query(max_length=16, pattern=r"^\d+\.\d+$")] = None,
) -> Response:
    """Best config for (kernel, key values, GPU model) with its match level:
    `exact`, else `compute_capability`, else `nearest_key`; 404 when nothing fits."""
    index = request.app.state.config_index
    index.refresh_if_stale()
    found = index.lookup(kernel, _parse_key(key), gpu_model, compute_capability)
    if found is None:
        return Response(json.dumps({"detail": f"no tuned config for kernel {kernel!r} on {gpu_model!r}"}).encode(),
                        status_code=404, media_type="application/json")
    return Response(json.dumps(found).encode(), media_type="application/json")


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
             responses={409: {"description": "a concurrent publish of the same config; retry"}})
def publish(body: PublishIn, request: Request, session: SessionDep, _: WriteAuth) -> BestConfigOut:
    """Record a config tuned by a client; an existing entry is replaced only by a faster one."""
    pk = canonical_key(body.problem_key)
    row = session.scalar(sa.select(BestConfig).where(BestConfig.kernel_fingerprint == body.kernel_fingerprint,
                                                     BestConfig.problem_key == pk,
                                                     BestConfig.gpu_model == body.gpu_model))
    if row is None:
        row = BestConfig(kernel_fingerprint=body.kernel_fingerprint, kernel_name=body.kernel_name, problem_key=pk,
                         gpu_model=body.gpu_model, compute_capability=body.compute_capability, config=body.config,
                         median_ms=body.median_ms, default_ms=body.default_ms, updated_at=utcnow())
        session.add(row)
    elif body.median_ms < row.median_ms:
        row.config, row.median_ms, row.default_ms = body.config, body.median_ms, body.default_ms or row.default_ms
        row.compute_capability, row.job_id, row.updated_at = body.compute_capability, None, utcnow()
    try:
        session.commit()
    except sa.exc.IntegrityError:  # a concurrent publish of the same entry won the insert
        session.rollback()
        raise HTTPException(409, "a concurrent publish of the same config; retry")
    request.app.state.config_index.invalidate()
    return BestConfigOut.of(row)
