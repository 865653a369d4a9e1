"""/healthz and /metrics (outside /api/v1)."""
from __future__ import annotations

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

router = APIRouter(tags=["health"])


@router.get("/healthz")
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
            "in_process_worker": bool(getattr(state, "worker", None)),
            "event_loop": state.event_loop, "config_index": state.config_index.health()}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics")
def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
