"""/healthz and /metrics (outside /api/v1)."""
from __future__ import annotations

import asyncio
from typing import Literal

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, Field

router = APIRouter(tags=["health"])


class DatabaseProbe:
    """`SELECT 1` in a worker thread, one at a time, waited for at most `timeout_s`: /healthz
    answers within that whatever the database does, and a stalled database holds one thread, not
    one per check (nor the thread pool the routes share)."""

    def __init__(self, engine, timeout_s: float = 2.0):
        self._engine = engine
        self.timeout_s = timeout_s
        self._pending: asyncio.Future | None = None

    def _ping(self) -> str:
        try:
            with self._engine.connect() as c:
                c.execute(sa.text("SELECT 1"))
            return "ok"
        except Exception as exc:  # report, don't crash
            return f"error: {type(exc).__name__}"

    async def check(self) -> str:
        if self._pending is None or self._pending.done():
            self._pending = asyncio.get_running_loop().run_in_executor(None, self._ping)
        try:
            return await asyncio.wait_for(asyncio.shield(self._pending), self.timeout_s)
        except asyncio.TimeoutError:
            return f"error: no answer within {self.timeout_s:g} s"


class ConfigIndexHealth(BaseModel):
    """How current the lookups' in-memory index is (they answer from it whatever the database does)."""
    rows: int
    checked_seconds_ago: float | None
    refresh_seconds: float
    stale: bool
    error: str | None


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    database: str = Field(description='"ok", or "error: <exception type>"')
    version: str
    database_backend: str
    in_process_worker: bool
    event_loop: str | None = Field(description='the event loop implementation ("uvloop" under `blocktune serve`)')
    config_index: ConfigIndexHealth




@router.get("/healthz", response_model=Health,
            responses={503: {"model": Health, "description": "degraded: the database does not answer"}})
async def healthz(request: Request) -> JSONResponse:
    """200 when the database answers, else 503; `config_index` tells how current the lookups'
    in-memory index is (they answer from it either way)."""
    state = request.app.state
    db = await state.database_probe.check()
    ok = db == "ok"
    body = {"status": "ok" if ok else "degraded", "database": db, "version": state.version,
            "database_backend": state.engine.dialect.name,
            "in_process_worker": bool(getattr(state, "worker", None)),
            "event_loop": state.event_loop, "config_index": state.config_index.health()}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, responses={
    200: {"description": "Prometheus text exposition format",
          "content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}})
def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
