"""/healthz and /metrics (outside /api/v1)."""
from __future__ import annotations

from typing import Literal

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, Field

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    database: str = Field(description='"ok", or "error: <exception type>"')
    version: str
    database_backend: str
    in_process_worker: bool


@router.get("/healthz", response_model=Health,
            responses={503: {"model": Health, "description": "degraded: the database does not answer"}})
def healthz(request: Request) -> JSONResponse:
    state = request.app.state
    try:
        with state.engine.connect() as c:
            c.execute(sa.text("SELECT 1"))
        db = "ok"
    except Exception as exc:  # report, don't crash
        db = f"error: {type(exc).__name__}"
    ok = db == "ok"
    body = {"status": "ok" if ok else "degraded", "database": db, "version": state.version,
            "database_backend": state.engine.dialect.name,
            "in_process_worker": bool(getattr(state, "worker", None))}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, responses={
    200: {"description": "Prometheus text exposition format",
          "content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}})
def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
