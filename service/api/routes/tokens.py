"""API tokens over HTTP: listing, creating and revoking them needs the `admin` scope, and a token
only grants scopes it holds itself."""
from __future__ import annotations

from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Path, Request, status

from db.models import ApiToken
from db.repo import revoke_token
from service.api.deps import AdminAuth, SessionDep
from service.api.routing import StandardJSONRoute
from service.api.schemas import TokenIn, TokenOut
from service.core.security import create_token, scopes_text

router = APIRouter(prefix="/tokens", tags=["tokens"], route_class=StandardJSONRoute)


@router.get("", response_model=list[TokenOut])
def list_tokens(session: SessionDep, _: AdminAuth) -> list[TokenOut]:
    return [TokenOut.of(t) for t in session.scalars(sa.select(ApiToken).order_by(ApiToken.id))]


@router.post("", response_model=TokenOut, status_code=status.HTTP_201_CREATED)
def new_token(body: TokenIn, session: SessionDep, caller: AdminAuth) -> TokenOut:
    """Create a token (its clear value is in this answer only). It may have only scopes that the
    token creating it has."""
    beyond = set(body.scopes) - set(caller.scopes)    # caller: a row, or deps' cached snapshot of one
    if beyond:
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"a token can only grant scopes it holds: this one lacks {scopes_text(beyond)} "
                            f"(it has: {scopes_text(caller.scopes)})")
    row, clear = create_token(session, body.name, body.scopes)
    session.commit()
    return TokenOut.of(row, clear)


@router.delete("/{token_id}", response_model=TokenOut, responses={404: {"description": "no such token"}})
def delete_token(token_id: Annotated[int, Path(ge=1, le=2**31 - 1)], request: Request, session: SessionDep,
                 _: AdminAuth) -> TokenOut:
    """Revoke a token; its dashboard sessions end with it."""
    row = revoke_token(session, str(token_id))
    if row is None:
        raise HTTPException(404, f"no token {token_id}")
    session.commit()
    request.app.state.verified_tokens.forget(row.id)
    return TokenOut.of(row)
