"""API tokens over HTTP (a token holder may list, create and revoke tokens)."""
from __future__ import annotations

from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Path, status

from db.models import ApiToken
from service.api.deps import SessionDep, WriteAuth
from service.api.routing import StandardJSONRoute
from service.api.schemas import TokenIn, TokenOut
from service.core.security import create_token, revoke_token

router = APIRouter(prefix="/tokens", tags=["tokens"], route_class=StandardJSONRoute)


@router.get("", response_model=list[TokenOut])
def list_tokens(session: SessionDep, _: WriteAuth) -> list[TokenOut]:
    return [TokenOut.of(t) for t in session.scalars(sa.select(ApiToken).order_by(ApiToken.id))]


@router.post("", response_model=TokenOut, status_code=status.HTTP_201_CREATED)
def new_token(body: TokenIn, session: SessionDep, _: WriteAuth) -> TokenOut:
    row, clear = create_token(session, body.name)
    session.commit()
    return TokenOut.of(row, clear)


@router.delete("/{token_id}", response_model=TokenOut, responses={404: {"description": "no such token"}})
def delete_token(token_id: Annotated[int, Path(ge=1, le=2**31 - 1)], session: SessionDep, _: WriteAuth) -> TokenOut:
    row = revoke_token(session, str(token_id))
    if row is None:
        raise HTTPException(404, f"no token {token_id}")
    session.commit()
    return TokenOut.of(row)
