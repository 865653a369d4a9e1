"""Why a job waits: no live worker can take it.

A queued job (or a running one whose lease expired: its workers stopped heartbeating) is taken by
a live worker of its GPU model, or by any live worker when it names none. When there is none, the
API (JobOut.waiting_reason), the dashboard's job page and `Client.wait` say what it waits for and
which workers are alive, instead of leaving it "queued" with no word.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import Gpu, Job, Worker, utcnow
from db.repo.hardware import alive_clause
from service.devices import CPU_LABEL, INTERPRETER_MODEL, device_label

# at most this many workers are named in a reason (then "and N more")
NAMED = 8


@dataclass(frozen=True)
class LiveWorker:
    name: str
    model: str | None


def live_workers(session: Session, alive_seconds: float) -> list[LiveWorker]:
    rows = session.execute(sa.select(Worker.name, Gpu.model).outerjoin(Gpu, Worker.gpu_id == Gpu.id)
                           .where(alive_clause(alive_seconds)).order_by(Worker.id))
    return [LiveWorker(name, model) for name, model in rows]


def is_waiting(job: Job) -> bool:
    """Queued, or running with an expired lease (no worker renews it)."""
    if job.state == "queued":
        return True
    return job.state == "running" and job.lease_expires_at is not None and job.lease_expires_at < utcnow()


def _wanted(gpu_model: str | None) -> tuple[str, str]:
    """(what the job waits for, how to start one)."""
    if gpu_model is None:
        return ("a worker (the job names no GPU model: any worker takes it)",
                "`blocktune worker --device N` on a GPU machine, or `blocktune worker --interpret` on the CPU")
    if gpu_model == INTERPRETER_MODEL:
        return (f"a {CPU_LABEL} worker (GPU model {gpu_model})",
                "`blocktune worker --interpret`, or `blocktune serve` on a machine without a GPU")
    return f"a worker with GPU model {gpu_model}", f"`blocktune worker --device N` on a machine with a {gpu_model}"


def waiting_reason(job: Job, live: list[LiveWorker]) -> str | None:
    """None when the job is not waiting or a live worker can take it; else what it waits for."""
    if not is_waiting(job):
        return None
    if any(job.gpu_model is None or w.model == job.gpu_model for w in live):
        return None
    wanted, start = _wanted(job.gpu_model)
    if not live:
        return f"waiting for {wanted}; no worker is alive: start one with {start}"
    named = ", ".join(f"{w.name} ({device_label(w.model)})" for w in live[:NAMED])
    more = f" and {len(live) - NAMED} more" if len(live) > NAMED else ""
    alive = f"{len(live)} worker{'s' if len(live) != 1 else ''} alive"
    return f"waiting for {wanted}; {alive}: {named}{more}, none of them for this job's GPU model"


def waiting_reasons(session: Session, alive_seconds: float, jobs: list[Job]) -> dict[int, str]:
    """waiting_reason of each job that has one (the live workers are read once, and only when a
    job waits)."""
    waiting = [j for j in jobs if is_waiting(j)]
    if not waiting:
        return {}
    live = live_workers(session, alive_seconds)
    return {j.id: r for j in waiting if (r := waiting_reason(j, live)) is not None}
