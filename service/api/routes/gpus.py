"""GPU models seen by workers, and the workers (alive = heartbeat younger than a setting)."""
from __future__ import annotations

import sqlalchemy as sa
from fastapi import APIRouter
from sqlalchemy.orm import selectinload

from db.models import Gpu, Worker
from service.api.deps import ReadAuth, SessionDep, SettingsDep
from service.api.schemas import GpuOut, WorkerOut, gpu_out
from service.waiting import alive_clause

router = APIRouter(tags=["gpus"])


def alive_worker_ids(session, settings) -> set[int]:
    return set(session.scalars(sa.select(Worker.id).where(alive_clause(settings.worker_alive_seconds))))


@router.get("/gpus", response_model=list[GpuOut])
def list_gpus(session: SessionDep, settings: SettingsDep, _: ReadAuth) -> list[GpuOut]:
    alive = alive_worker_ids(session, settings)
    gpus = session.scalars(sa.select(Gpu).options(selectinload(Gpu.workers)).order_by(Gpu.id))
    return [gpu_out(g, alive) for g in gpus]


@router.get("/workers", response_model=list[WorkerOut])
def list_workers(session: SessionDep, settings: SettingsDep, _: ReadAuth) -> list[WorkerOut]:
    alive = alive_worker_ids(session, settings)
    ws = session.scalars(sa.select(Worker).options(selectinload(Worker.gpu)).order_by(Worker.id))
    return [WorkerOut.of(w, w.id in alive) for w in ws]
