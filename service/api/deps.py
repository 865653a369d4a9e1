"""FastAPI dependencies (`Annotated` style): database session, settings, token auth."""
from __future__ import annotations

import time
from typing import Annotated, Iterator

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy.orm import Session

from db.models import ApiToken, utcnow
from service.core.config import Settings
from service.core.security import find_token


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessionmaker() as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]


# the dashboard's login stores the token in this cookie (service/dashboard/login.py)
TOKEN_COOKIE = "blocktune_token"


def token_from_request(request: Request, *, cookie: bool = False) -> str | None:
    """The token of `Authorization: Bearer`, `X-API-Token`, or (with cookie=True) the login cookie.
    Writes never take the cookie: a browser attaches it by itself, the headers only a client
    that means to."""
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    token = request.headers.get("x-api-token")
    if token:
        return token
    return request.cookies.get(TOKEN_COOKIE) if cookie else None


_LAST_USED_EVERY_S = 60.0


def _authenticate(request: Request, session: Session, *, cookie: bool = False) -> ApiToken:
    clear = token_from_request(request, cookie=cookie)
    if not clear:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "an API token is required (Authorization: Bearer <token>;"
                            " create one with `blocktune token create`)", headers={"WWW-Authenticate": "Bearer"})
    row = find_token(session, clear)
    if row is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API token",
                            headers={"WWW-Authenticate": "Bearer"})
    # record use, at most once a minute per token (a write per request would serialize SQLite)
    seen = request.app.state.token_last_used
    now = time.monotonic()
    if now - seen.get(row.id, -1e9) > _LAST_USED_EVERY_S:
        seen[row.id] = now
        row.last_used_at = utcnow()
        session.commit()
    return row


def require_token(request: Request, session: SessionDep) -> ApiToken:
    return _authenticate(request, session)


def authenticate_read(request: Request) -> ApiToken:
    """Check a read's token (header or login cookie) in a session of its own; raises 401."""
    with request.app.state.sessionmaker() as session:
        return _authenticate(request, session, cookie=True)


async def read_access(request: Request) -> ApiToken | None:
    """Reads need a token only when the `read_requires_token` setting is on (then a session is
    opened in the thread pool; otherwise this costs nothing on the event loop). The dashboard's
    login cookie counts for reads."""
    if request.app.state.settings.read_requires_token:
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(authenticate_read, request)
    return None


WriteAuth = Annotated[ApiToken, Depends(require_token)]
ReadAuth = Annotated[ApiToken | None, Depends(read_access)]
