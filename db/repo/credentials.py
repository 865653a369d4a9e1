"""API tokens and the dashboard's login sessions, stored by their sha256 only: the clear token and
session id are made and hashed by the service (service/core/security.py), never seen here."""
from __future__ import annotations

import datetime as dt
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import ApiToken, DashboardSession, utcnow


def add_token(session: Session, *, name: str, token_hash: str, prefix: str, scopes: Iterable[str]) -> ApiToken:
    """A new live token. Flushes to get the id."""
    row = ApiToken(name=name, token_hash=token_hash, prefix=prefix, scopes=frozenset(scopes), created_at=utcnow())
    session.add(row)
    session.flush()
    return row


def revoke_token(session: Session, ident: str) -> ApiToken | None:
    """Revoke by id or by prefix, ending the token's dashboard sessions; returns the row, or None
    when none matches."""
    q = sa.select(ApiToken)
    q = q.where(ApiToken.id == int(ident)) if ident.isdigit() else q.where(ApiToken.prefix == ident)
    row = session.scalar(q)
    if row is not None:
        if row.revoked_at is None:
            row.revoked_at = utcnow()
        session.execute(sa.delete(DashboardSession).where(DashboardSession.token_id == row.id))
    return row


def touch_token(session: Session, token_id: int) -> None:
    """The token was used now."""
    session.execute(sa.update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=utcnow()))


def start_session(session: Session, *, session_hash: str, token: ApiToken, lifetime_s: float) -> DashboardSession:
    """A dashboard session of `token` for `lifetime_s`; sessions that ran out are deleted on the way."""
    now = utcnow()
    session.execute(sa.delete(DashboardSession).where(DashboardSession.expires_at <= now))
    row = DashboardSession(session_hash=session_hash, token_id=token.id, created_at=now,
                           expires_at=now + dt.timedelta(seconds=lifetime_s))
    session.add(row)
    session.flush()
    return row


def end_session(session: Session, session_hash: str) -> None:
    session.execute(sa.delete(DashboardSession).where(DashboardSession.session_hash == session_hash))
