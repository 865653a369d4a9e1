"""FastAPI dependencies (`Annotated` style): database session, settings, token auth and scopes.

Each operation names the scope it needs: reads `read` (only when the `read_requires_token` setting
is on), publishing configs `publish`, submitting and cancelling jobs `submit`, managing tokens
`admin`. No token or a bad one: 401; a token without the scope: 403 naming it."""
from __future__ import annotations

from typing import Annotated, AsyncIterator

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from db import repo
from db.models import TOKEN_SCOPES
from service.core.config import Settings
from service.core.security import find_session_token, find_token, scopes_text
from service.core.token_cache import TokenSnapshot, VerifiedTokens


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A session for the request. Made on the event loop (that touches no database); closed there
    too when it holds no connection any more (a route that ended its transactions), else in the
    thread pool (closing rolls back on the connection: database I/O). A sync generator would cost
    two trips to the thread pool per request, each a hand-over of the GIL the lookups wait on."""
    session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        if session.in_transaction():
            await run_in_threadpool(session.close)
        else:
            session.close()


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


_BEARER = {"WWW-Authenticate": "Bearer"}


def _verify_header_token(request: Request, session: Session, clear: str) -> TokenSnapshot:
    """The snapshot of a header token, from the verified-token cache or (on a miss) the database;
    raises 401, or 503 when the database is away and the token was never seen."""
    tokens: VerifiedTokens = request.app.state.verified_tokens
    snap = tokens.get(clear)
    if snap is not None:
        return snap
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
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid or revoked API token", headers=_BEARER)
    snap = TokenSnapshot.of(row)
    tokens.put(clear, snap)
    return snap


def _authenticate(request: Request, session: Session, *, cookie: bool = False) -> TokenSnapshot:
    """The live token of the request's headers, or with cookie=True (reads) the token of its
    dashboard session when it has no such header; raises 401. Callers check its `.scopes`.
    Runs in the thread pool: it may query the database."""
    clear = token_from_request(request)
    if clear:
        snap = _verify_header_token(request, session, clear)
    elif cookie and (sid := session_from_request(request)):
        row = find_session_token(session, sid)
        if row is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "the dashboard session has ended (it expired, was "
                                "logged out, or its token was revoked): log in again at /login", headers=_BEARER)
        snap = TokenSnapshot.of(row)
    else:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "an API token is required (Authorization: Bearer <token>;"
                            " create one with `blocktune token create`)", headers=_BEARER)
    tokens: VerifiedTokens = request.app.state.verified_tokens
    if tokens.use_due(snap.id):
        tokens.used(snap.id)
        try:
            repo.touch_token(session, snap.id)
            session.commit()
        except SQLAlchemyError:  # bookkeeping only: a database away must not refuse a verified token
            session.rollback()
    return snap


def require_token(request: Request) -> TokenSnapshot:
    """A valid token in the headers (any scope), checked in a session of its own; raises 401.
    Runs in the thread pool: it may query the database."""
    with request.app.state.sessionmaker() as session:
        return _authenticate(request, session)


def check_scope(token: TokenSnapshot, scope: str) -> None:
    """403 naming the scope when `token` lacks it."""
    if not token.allows(scope):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"this API token lacks the '{scope}' scope (it has: {scopes_text(token.scopes) or 'none'}); "
            f"use a token that has it (`blocktune token create NAME --scope {scope}`)",
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'})


def require_scope(scope: str):
    """A dependency: a valid header token (401 otherwise) that has `scope` (403 otherwise)."""
    if scope not in TOKEN_SCOPES:
        raise ValueError(f"unknown scope {scope!r}")

    async def dependency(request: Request) -> TokenSnapshot:
        # a header token verified in the last seconds lets the request through from memory, as
        # for reads (read_access); else it is checked in the thread pool
        token = request.app.state.verified_tokens.fresh(token_from_request(request))
        if token is None:
            token = await run_in_threadpool(require_token, request)
        check_scope(token, scope)
        return token

    dependency.__name__ = f"require_{scope}_scope"
    return dependency


def authenticate_read(request: Request) -> TokenSnapshot:
    """Check a read's token (header or login session) in a session of its own; raises 401. The
    caller checks the `read` scope."""
    with request.app.state.sessionmaker() as session:
        return _authenticate(request, session, cookie=True)


async def read_access(request: Request) -> TokenSnapshot | None:
    """Reads need a token with the `read` scope only when the `read_requires_token` setting is on.
    A header token verified in the last seconds lets the read through from memory; otherwise it
    is checked in the thread pool (never on the event loop). The dashboard's login session counts
    for reads."""
    if request.app.state.settings.read_requires_token:
        snap = request.app.state.verified_tokens.fresh(token_from_request(request))
        if snap is not None:
            check_scope(snap, "read")
            return snap
        token = await run_in_threadpool(authenticate_read, request)
        check_scope(token, "read")
        return token
    return None


ReadAuth = Annotated[TokenSnapshot | None, Depends(read_access)]
PublishAuth = Annotated[TokenSnapshot, Depends(require_scope("publish"))]
SubmitAuth = Annotated[TokenSnapshot, Depends(require_scope("submit"))]
AdminAuth = Annotated[TokenSnapshot, Depends(require_scope("admin"))]
