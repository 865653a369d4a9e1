"""GPUs (one row per model and compute capability) and the workers attached to them."""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import Gpu, Worker, utcnow


def capability_str(capability) -> str:
    if isinstance(capability, str):
        return capability
    major, minor = capability
    return f"{major}.{minor}"


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


def register_worker(session: Session, *, name: str, gpu: Gpu, device_index: int) -> Worker:
    """The worker row named `name`, created or taken over (a restarted worker keeps its row), idle
    and just seen. Flushes to get the id."""
    row = session.scalar(sa.select(Worker).where(Worker.name == name))
    now = utcnow()
    if row is None:
        row = Worker(name=name, gpu_id=gpu.id, device_index=device_index, state="idle", started_at=now,
                     last_heartbeat_at=now)
        session.add(row)
    else:
        row.gpu_id, row.device_index, row.state = gpu.id, device_index, "idle"
        row.started_at, row.last_heartbeat_at = now, now
    session.flush()
    return row


def set_worker_state(session: Session, worker_id: int, state: str) -> None:
    """A worker's state (idle, busy, stopped), and its heartbeat: it was seen now."""
    session.execute(sa.update(Worker).where(Worker.id == worker_id).values(state=state, last_heartbeat_at=utcnow()))
