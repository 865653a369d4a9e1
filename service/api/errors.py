"""How the service answers errors: 422 naming each field, 503 while the database is unreachable,
and a well-formed JSON 500 (never a reset connection) for a bug.

Uvicorn closes a keep-alive connection when an exception leaves the application — which
Starlette's outermost ServerErrorMiddleware always lets happen, even after it has sent its plain
"Internal Server Error". InternalErrorMiddleware sits inside it, answers a JSON 500 with a request id
that is also in the server log with the traceback, and lets the exception go no further, so the
client's connection stays usable.
"""
from __future__ import annotations

import json
import logging
import uuid

import sqlalchemy as sa
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import compile_path

from service.api.routing import api_routes
from service.api.schemas import FieldError, ValidationErrorOut

log = logging.getLogger("blocktune.api")

RETRY_AFTER_S = 5


def _field(loc) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        where, rest = parts[0], parts[1:]
        return f"{where}.{'.'.join(rest)}" if rest else where
    return ".".join(parts)


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming the field and the reason (the input is not echoed)."""
    detail = []
    for e in exc.errors():
        loc = [p if isinstance(p, int) else str(p) for p in e.get("loc", ())]
        reason = e.get("msg") or "invalid"
        error = (e.get("ctx") or {}).get("error")
        if e.get("type") == "json_invalid" and error and str(error) not in reason:
            reason = f"{reason}: {error}"
        detail.append(FieldError(field=_field(loc), reason=reason, type=str(e.get("type") or "value_error"), loc=loc))
    return JSONResponse(ValidationErrorOut(detail=detail).model_dump(), status_code=422)


def _allowed_methods(app, path: str) -> set[str]:
    index = getattr(app.state, "methods_by_path", None)
    if index is None:
        by_template: dict[str, set[str]] = {}
        for template, route in api_routes(app):
            by_template.setdefault(template, set()).update(route.methods or ())
        index = app.state.methods_by_path = [(compile_path(t)[0], m) for t, m in by_template.items()]
    return set().union(*(methods for regex, methods in index if regex.match(path)))


async def method_not_allowed(request: Request, exc: HTTPException) -> JSONResponse:
    """405 whose Allow lists every method of the path: Starlette lists only those of the first route
    that matched it (GET /configs, not also POST /configs)."""
    allowed = _allowed_methods(request.app, request.url.path)
    headers = {"Allow": ", ".join(sorted(allowed))} if allowed else (exc.headers or {})
    return JSONResponse({"detail": exc.detail}, status_code=405, headers=headers)


# SQLSTATE classes of a database that is down or going away, not of a bad statement:
# 08 connection exception, 53 insufficient resources, 57 operator intervention (shutdown)
_UNAVAILABLE_SQLSTATE = ("08", "53", "57")
# SQLite: another writer holds the lock past the busy timeout, the file cannot be opened or read
_UNAVAILABLE_SQLITE = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_FULL")


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be used now (retrying later may work), as opposed to
    a statement the database refuses (a bug: 500)."""
    if not isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        return isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated
    if exc.connection_invalidated or isinstance(exc, sa.exc.InterfaceError):
        return True
    orig = exc.orig
    name = getattr(orig, "sqlite_errorname", None)
    if name is not None:
        return "_".join(name.split("_")[:2]) in _UNAVAILABLE_SQLITE   # SQLITE_IOERR_READ → SQLITE_IOERR
    sqlstate = getattr(orig, "sqlstate", None)
    # psycopg: an OperationalError without a SQLSTATE failed to connect (refused, reset, timed out)
    return sqlstate is None or sqlstate[:2] in _UNAVAILABLE_SQLSTATE


def _unavailable_body(exc: BaseException) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = json.dumps({"detail": f"the database is unavailable ({type(getattr(exc, 'orig', exc)).__name__}); "
                                 f"retry in a few seconds"}).encode()
    return body, [(b"retry-after", str(RETRY_AFTER_S).encode())]


class InternalErrorMiddleware:
    """Pure ASGI: 503 with Retry-After for an unreachable database, a JSON 500 with a request id
    for anything else, when the response has not started; the exception is logged, not re-raised."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - the last place to turn any failure into an answer
            if started:        # part of a response is out: nothing well-formed can follow
                raise
            if database_unavailable(exc):
                log.warning("%s %s: database unavailable: %s", scope["method"], scope["path"], exc)
                body, headers = _unavailable_body(exc)
                status = 503
            else:
                request_id = uuid.uuid4().hex[:16]
                log.exception("%s %s failed (request id %s)", scope["method"], scope["path"], request_id)
                body = json.dumps({"detail": f"internal server error (request id {request_id}); the server log "
                                             f"has the details", "request_id": request_id}).encode()
                headers = [(b"x-request-id", request_id.encode())]
                status = 500
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode()), *headers]})
            await send({"type": "http.response.body", "body": body})
