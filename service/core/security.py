"""Credentials: API tokens (generated once, stored as a sha256 hex digest, scoped, revocable) and the
dashboard's login sessions (a random id in the browser's cookie, stored hashed, tied to a token).
The secrets are made and hashed here; their rows are written through db.repo."""
from __future__ import annotations

import hashlib
import secrets
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db import repo
from db.models import TOKEN_SCOPES, ApiToken, DashboardSession, utcnow

TOKEN_PREFIX = "bt_"

# what a token gets when its creator names no scopes: everything a client does, but not managing
# tokens (admin is always asked for by name)
DEFAULT_SCOPES: frozenset[str] = frozenset({"read", "publish", "submit"})


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def parse_scopes(values: Iterable[str]) -> frozenset[str]:
    """Scope names, each item possibly comma-separated ("read,publish"); ValueError names an
    unknown one. An empty result is an error too: a token without scopes can do nothing."""
    scopes = {part.strip().lower() for v in values for part in v.split(",") if part.strip()}
    unknown = sorted(scopes - set(TOKEN_SCOPES))
    if unknown:
        raise ValueError(f"unknown scope {', '.join(map(repr, unknown))}: choose from {', '.join(TOKEN_SCOPES)}")
    if not scopes:
        raise ValueError(f"name at least one scope: {', '.join(TOKEN_SCOPES)}")
    return frozenset(scopes)


def scopes_text(scopes: Iterable[str]) -> str:
    """"read,publish" — in TOKEN_SCOPES order, as the CLI takes and shows them."""
    have = set(scopes)
    return ",".join(s for s in TOKEN_SCOPES if s in have)


def create_token(session: Session, name: str, scopes: Iterable[str] = DEFAULT_SCOPES) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the clear token (shown once, never stored)."""
    clear = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = repo.add_token(session, name=name, token_hash=hash_token(clear), prefix=clear[:10],
                         scopes=parse_scopes(scopes))
    return row, clear


def find_token(session: Session, clear: str) -> ApiToken | None:
    """The live (not revoked) token row matching `clear`, or None."""
    if not clear or len(clear) > 200:
        return None
    return session.scalar(sa.select(ApiToken).where(ApiToken.token_hash == hash_token(clear),
                                                    ApiToken.revoked_at.is_(None)))


# -- dashboard sessions ----------------------------------------------------------------------------
def start_session(session: Session, token: ApiToken, lifetime_s: float) -> str:
    """Open a dashboard session for `token`; returns the clear session id for the cookie (stored
    hashed only). Sessions that ran out are deleted on the way."""
    clear = secrets.token_urlsafe(32)
    repo.start_session(session, session_hash=hash_token(clear), token=token, lifetime_s=lifetime_s)
    return clear


def find_session_token(session: Session, clear: str) -> ApiToken | None:
    """The token of the live session `clear` (not expired, its token not revoked), or None."""
    if not clear or len(clear) > 200:
        return None
    return session.scalar(sa.select(ApiToken).join(DashboardSession).where(
        DashboardSession.session_hash == hash_token(clear), DashboardSession.expires_at > utcnow(),
        ApiToken.revoked_at.is_(None)))


def end_session(session: Session, clear: str) -> None:
    """Logout: the session is deleted (its cookie is worth nothing from now on)."""
    if clear and len(clear) <= 200:
        repo.end_session(session, hash_token(clear))
