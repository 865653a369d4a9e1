"""GPUs (one row per model and compute capability) and the workers attached to them."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import Gpu, Worker, utcnow


def capability_str(capability) -> str:
    if isinstance(capability, str):
        return capability
    major, minor = capability
    return f"{major}.{minor}"


def alive_clause(alive_seconds: float):
    """Workers whose last heartbeat is younger than `alive_seconds` and that did not stop."""
    since = utcnow() - dt.timedelta(seconds=alive_seconds)
    return sa.and_(Worker.last_heartbeat_at >= since, Worker.state != "stopped")


def get_or_create_gpu(session: Session, props: dict[str, Any]) -> Gpu:
    """`props` as compiler.runtime.driver.device_properties() returns it."""
    model = str(props["name"])
    cc = capability_str(props["capability"])
    gpu = session.scalars(sa.select(Gpu).where(Gpu.model == model, Gpu.compute_capability == cc)).first()
    values = dict(sm_count=int(props.get("sm_count") or 0), total_memory=int(props.get("total_memory") or 0),
                  driver_version=str(props.get("driver_version") or ""), cuda_version=str(props.get("cuda_version") or ""))
    if gpu is None:
        gpu = Gpu(model=model, compute_capability=cc, **values)
        try:
            with session.begin_nested():
                session.add(gpu)
        except sa.exc.IntegrityError:
            gpu = session.scalars(sa.select(Gpu).where(Gpu.model == model, Gpu.compute_capability == cc)).one()
    else:
        for k, v in values.items():
            if v and getattr(gpu, k) != v:
                setattr(gpu, k, v)
    return gpu


@dataclass(frozen=True)
class Registration:
    """What registering under a name gave: the row's id when this worker now owns it; else the
    last heartbeat of the live worker that holds it (None when another process inserted the name
    first: look again)."""
    worker_id: int | None
    holder_heartbeat: dt.datetime | None = None


def register_worker(session: Session, *, name: str, gpu: Gpu, device_index: int,
                    alive_seconds: float) -> Registration:
    """Take the worker row named `name`: inserted, or taken over from a worker that stopped or
    whose heartbeat is older than `alive_seconds` (a restarted worker keeps its row), idle and just
    seen. Two live workers never share a row: one held by a live worker is left alone."""
    now = utcnow()
    stale = sa.or_(Worker.state == "stopped", Worker.last_heartbeat_at.is_(None),
                   Worker.last_heartbeat_at < now - dt.timedelta(seconds=alive_seconds))
    fresh = dict(gpu_id=gpu.id, device_index=device_index, state="idle", started_at=now, last_heartbeat_at=now)
    row = session.execute(sa.select(Worker.id, Worker.last_heartbeat_at).where(Worker.name == name)).first()
    if row is not None:
        # a compare-and-set on staleness: of two workers taking over one stale row, one wins
        took = session.execute(sa.update(Worker).where(Worker.id == row.id, stale).values(**fresh)
                               .execution_options(synchronize_session=False)).rowcount
        return Registration(row.id) if took else Registration(None, row.last_heartbeat_at)
    try:
        with session.begin_nested():
            return Registration(session.execute(sa.insert(Worker).values(name=name, **fresh)
                                                .returning(Worker.id)).scalar_one())
    except sa.exc.IntegrityError:   # the unique name: another process inserted it first
        return Registration(None)


def set_worker_state(session: Session, worker_id: int, state: str) -> None:
    """A worker's state (idle, busy, stopped), and its heartbeat: it was seen now."""
    session.execute(sa.update(Worker).where(Worker.id == worker_id).values(state=state, last_heartbeat_at=utcnow()))
