"""FastAPI dependencies (`Annotated` style): database session, settings, token auth."""
from __future__ import annotations

from typing import Annotated, Iterator

import sqlalchemy as sa
from fastapi import Depends, HTTPException, Request, status
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from db.models import ApiToken, utcnow
from service.core.config import Settings
from service.core.security import find_token
from service.core.token_cache import TokenSnapshot, VerifiedTokens


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


def _authenticate(request: Request, session: Session, *, cookie: bool = False) -> TokenSnapshot:
    """The token's snapshot, from the verified-token cache or (on a miss) the database; raises 401.
    Runs in the thread pool: it may query the database."""
    clear = token_from_request(request, cookie=cookie)
    if not clear:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "an API token is required (Authorization: Bearer <token>;"
                            " create one with `blocktune token create`)", headers={"WWW-Authenticate": "Bearer"})
    tokens: VerifiedTokens = request.app.state.verified_tokens
    snap = tokens.get(clear)
    if snap is None:
        try:
            row = find_token(session, clear)
        except SQLAlchemyError as exc:
            session.rollback()
            # the database is away: a token verified before still holds (revoking it would be a
            # database write), trusted for another TTL so that the next requests do not ask again
            snap = tokens.last_known(clear)
            if snap is None:
                raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "cannot check the API token now: the "
                                    f"database is unavailable ({type(exc).__name__}); retry shortly") from exc
            tokens.put(clear, snap)
            return snap
        if row is None:
            tokens.discard(clear)
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API token",
                                headers={"WWW-Authenticate": "Bearer"})
        snap = TokenSnapshot.of(row)
        tokens.put(clear, snap)
    if tokens.use_due(snap.id):
        tokens.used(snap.id)
        try:
            session.execute(sa.update(ApiToken).where(ApiToken.id == snap.id).values(last_used_at=utcnow()))
            session.commit()
        except SQLAlchemyError:  # bookkeeping only: a database away must not refuse a verified token
            session.rollback()
    return snap


def require_token(request: Request, session: SessionDep) -> TokenSnapshot:
    return _authenticate(request, session)


def authenticate_read(request: Request) -> TokenSnapshot:
    """Check a read's token (header or login cookie) in a session of its own; raises 401."""
    with request.app.state.sessionmaker() as session:
        return _authenticate(request, session, cookie=True)


async def read_access(request: Request) -> TokenSnapshot | None:
    """Reads need a token only when the `read_requires_token` setting is on. A token verified in
    the last seconds lets the read through from memory; otherwise it is checked in the thread pool
    (never on the event loop). The dashboard's login cookie counts for reads."""
    if request.app.state.settings.read_requires_token:
        snap = request.app.state.verified_tokens.fresh(token_from_request(request, cookie=True))
        if snap is not None:
            return snap
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(authenticate_read, request)
    return None


WriteAuth = Annotated[TokenSnapshot, Depends(require_token)]
ReadAuth = Annotated[TokenSnapshot | None, Depends(read_access)]
