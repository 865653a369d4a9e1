"""API tokens: generated once, stored as a sha256 hex digest, revocable."""
from __future__ import annotations

import hashlib
import secrets

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import ApiToken, utcnow

TOKEN_PREFIX = "bt_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def create_token(session: Session, name: str) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the clear token (shown once, never stored)."""
    clear = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(name=name, token_hash=hash_token(clear), prefix=clear[:10], created_at=utcnow())
    session.add(row)
    session.flush()
    return row, clear


def find_token(session: Session, clear: str) -> ApiToken | None:
    """The live (not revoked) token row matching `clear`, or None."""
    if not clear or len(clear) > 200:
        return None
    return session.scalar(sa.select(ApiToken).where(ApiToken.token_hash == hash_token(clear),
                                                    ApiToken.revoked_at.is_(None)))


def revoke_token(session: Session, ident: str) -> ApiToken | None:
    """Revoke by id or by prefix; returns the row, or None when none matches."""
    q = sa.select(ApiToken)
    q = q.where(ApiToken.id == int(ident)) if ident.isdigit() else q.where(ApiToken.prefix == ident)
    row = session.scalar(q)
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
    return row
