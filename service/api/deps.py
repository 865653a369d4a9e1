"""FastAPI dependencies (`Annotated` style): database session, settings, token auth and scopes.

Each operation names the scope it needs: reads `read` (only when the `read_requires_token` setting
is on), publishing configs `publish`, submitting and cancelling jobs `submit`, managing tokens
`admin`. No token or a bad one: 401; a token without the scope: 403 naming it."""
from __future__ import annotations

import time
from typing import Annotated, Iterator

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy.orm import Session

from db.models import TOKEN_SCOPES, ApiToken, utcnow
from service.api.schemas import ErrorOut
from service.core.config import Settings
from service.core.security import find_session_token, find_token, scopes_text


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessionmaker() as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]


# the dashboard's login keeps a session id (never the token) in this cookie (service/dashboard/login.py)
SESSION_COOKIE = "blocktune_session"


def token_from_request(request: Request) -> str | None:
    """The token of `Authorization: Bearer` or `X-API-Token`: only a client that means to send a
    token sends these headers. Cookies hold no token (the dashboard's is a session id:
    `session_from_request`)."""
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return request.headers.get("x-api-token") or None


def session_from_request(request: Request) -> str | None:
    """The dashboard session id of the login cookie. It counts for reads only: a browser attaches
    it by itself, also to a request another site's page makes it send, so writes never take it."""
    return request.cookies.get(SESSION_COOKIE) or None


_LAST_USED_EVERY_S = 60.0
_BEARER = {"WWW-Authenticate": "Bearer"}


def _authenticate(request: Request, session: Session, *, cookie: bool = False) -> ApiToken:
    """The live token of the request's headers, or with cookie=True (reads) the token of its
    dashboard session when it has no such header; raises 401. Callers check its `.scopes`."""
    clear = token_from_request(request)
    if clear:
        row = find_token(session, clear)
        if row is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API token", headers=_BEARER)
    elif cookie and (sid := session_from_request(request)):
        row = find_session_token(session, sid)
        if row is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "the dashboard session has ended (it expired, was "
                                "logged out, or its token was revoked): log in again at /login", headers=_BEARER)
    else:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "an API token is required (Authorization: Bearer <token>;"
                            " create one with `blocktune token create`)", headers=_BEARER)
    # record use, at most once a minute per token (a write per request would serialize SQLite)
    seen = request.app.state.token_last_used
    now = time.monotonic()
    if now - seen.get(row.id, -1e9) > _LAST_USED_EVERY_S:
        seen[row.id] = now
        row.last_used_at = utcnow()
        session.commit()
    return row


def require_token(request: Request, session: SessionDep) -> ApiToken:
    """A valid token in the headers (any scope); raises 401."""
    return _authenticate(request, session)


def check_scope(token: ApiToken, scope: str) -> None:
    """403 naming the scope when `token` (a row, or anything with `.scopes`) lacks it."""
    if scope not in token.scopes:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"this API token lacks the '{scope}' scope (it has: {scopes_text(token.scopes) or 'none'}); "
            f"use a token that has it (`blocktune token create NAME --scope {scope}`)",
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'})


def require_scope(scope: str):
    """A dependency: a valid header token (401 otherwise) that has `scope` (403 otherwise)."""
    if scope not in TOKEN_SCOPES:
        raise ValueError(f"unknown scope {scope!r}")

    async def dependency(token: Annotated[ApiToken, Depends(require_token)]) -> ApiToken:
        check_scope(token, scope)
        return token

    dependency.__name__ = f"require_{scope}_scope"
    return dependency


def authenticate_read(request: Request) -> ApiToken:
    """Check a read's token (header or login session) in a session of its own; raises 401. The
    caller checks the `read` scope."""
    with request.app.state.sessionmaker() as session:
        return _authenticate(request, session, cookie=True)


async def read_access(request: Request) -> ApiToken | None:
    """Reads need a token with the `read` scope only when the `read_requires_token` setting is on
    (then a session is opened in the thread pool; otherwise this costs nothing on the event loop).
    The dashboard's login session counts for reads."""
    if request.app.state.settings.read_requires_token:
        from starlette.concurrency import run_in_threadpool

        token = await run_in_threadpool(authenticate_read, request)
        check_scope(token, "read")
        return token
    return None


ReadAuth = Annotated[ApiToken | None, Depends(read_access)]
PublishAuth = Annotated[ApiToken, Depends(require_scope("publish"))]
SubmitAuth = Annotated[ApiToken, Depends(require_scope("submit"))]
AdminAuth = Annotated[ApiToken, Depends(require_scope("admin"))]

# what every /api/v1 operation may answer besides its own codes (reads: when they need a token)
AUTH_RESPONSES: dict[int | str, dict] = {
    401: {"model": ErrorOut, "description": "no API token, or an unknown or revoked one"},
    403: {"model": ErrorOut, "description": "the API token lacks the scope this operation needs "
                                            "(reads: `read`; publishing: `publish`; jobs: `submit`; tokens: `admin`)"},
}
