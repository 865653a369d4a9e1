"""Kernels known to the service (registered when a job is submitted)."""
from __future__ import annotations

from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Path

from db.models import Job, Kernel
from service.api.deps import ReadAuth, SessionDep
from service.api.schemas import KernelOut

router = APIRouter(prefix="/kernels", tags=["kernels"])


@router.get("", response_model=list[KernelOut])
def list_kernels(session: SessionDep, _: ReadAuth) -> list[KernelOut]:
    counts = dict(session.execute(sa.select(Job.kernel_id, sa.func.count()).group_by(Job.kernel_id)).all())
    return [KernelOut.of(k, counts.get(k.id, 0)) for k in session.scalars(sa.select(Kernel).order_by(Kernel.id))]


@router.get("/{ident}", response_model=KernelOut, responses={404: {"description": "no such kernel"}})
def get_kernel(ident: Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")],
               session: SessionDep, _: ReadAuth) -> KernelOut:
    """A kernel by id, fingerprint or name (the latest of that name), with its source."""
    q = sa.select(Kernel)
    if ident.isdigit() and len(ident) < 10:
        q = q.where(Kernel.id == int(ident))
    else:
        q = q.where(sa.or_(Kernel.fingerprint == ident, Kernel.name == ident)).order_by(Kernel.id.desc())
    k = session.scalars(q.limit(1)).first()
    if k is None:
        raise HTTPException(404, f"no kernel {ident!r}")
    n = session.scalar(sa.select(sa.func.count()).select_from(Job).where(Job.kernel_id == k.id)) or 0
    return KernelOut.of(k, n, with_source=True)
