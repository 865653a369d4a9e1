"""Repository functions over the models: small, explicit, used by the tuner and the service.

Each function takes a Session and leaves committing to the caller unless it says otherwise.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import JOB_FINAL_STATES, TRIAL_STATUSES, BestConfig, Gpu, Job, Kernel, Trial, utcnow


def canonical_key(values: dict[str, Any]) -> str:
    """The canonical JSON of a problem key: sorted keys, no spaces (the `problem_key` column)."""
    return json.dumps(values, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(obj):
    for attr in ("item",):  # numpy / torch scalars
        if hasattr(obj, attr):
            return obj.item()
    raise TypeError(f"not JSON-serializable in a problem key: {obj!r}")


def capability_str(capability) -> str:
    if isinstance(capability, str):
        return capability
    major, minor = capability
    return f"{major}.{minor}"


# --- GPUs and kernels -------------------------------------------------------------------------

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


def get_or_create_kernel(session: Session, *, fingerprint: str, name: str, source: str,
                         compiler_version: str) -> Kernel:
    k = session.scalars(sa.select(Kernel).where(Kernel.fingerprint == fingerprint)).first()
    if k is not None:
        return k
    k = Kernel(fingerprint=fingerprint, name=name, source=source, compiler_version=compiler_version)
    try:
        with session.begin_nested():
            session.add(k)
    except sa.exc.IntegrityError:
        k = session.scalars(sa.select(Kernel).where(Kernel.fingerprint == fingerprint)).one()
    return k


# --- jobs -------------------------------------------------------------------------------------

def create_job(session: Session, kernel: Kernel, spec: dict[str, Any], *, gpu_model: str | None = None,
               idempotency_key: str | None = None, trials_total: int | None = None) -> Job:
    """A queued job; its Optuna study is named `job-<id>`. Flushes to get the id."""
    job = Job(kernel=kernel, spec=spec, gpu_model=gpu_model, idempotency_key=idempotency_key,
              trials_total=trials_total, state="queued", progress=0.0, trials_done=0, study_name="")
    session.add(job)
    session.flush()
    job.study_name = f"job-{job.id}"
    session.flush()
    return job


def job_state(session: Session, job_id: int) -> str | None:
    return session.scalar(sa.select(Job.state).where(Job.id == job_id).execution_options(populate_existing=True))


def finish_job(session: Session, job_id: int, state: str, *, error: str | None = None) -> bool:
    """Set a final state unless the job already has one (e.g. it was cancelled). True if set."""
    assert state in JOB_FINAL_STATES
    now = utcnow()
    res = session.execute(
        sa.update(Job).where(Job.id == job_id, Job.state.not_in(JOB_FINAL_STATES))
        .values(state=state, error=error, finished_at=now, updated_at=now, lease_expires_at=None)
    )
    return res.rowcount == 1


# --- trials -----------------------------------------------------------------------------------

# a trial refused by a constraint of the search space is recorded (status "invalid", its error
# starting with this) but does not count against the trial budget; every other trial does
UNCOUNTED_ERROR_PREFIX = "constraint violated: "


def counted_trials(job_id):
    """WHERE clause of the job's trials that count against its budget (`jobs.trials_done`)."""
    return sa.and_(Trial.job_id == job_id,
                   sa.or_(Trial.status != "invalid", Trial.error.is_(None),
                          ~Trial.error.startswith(UNCOUNTED_ERROR_PREFIX)))


def count_trials(session: Session, job_id: int) -> int:
    return int(session.scalar(sa.select(sa.func.count()).select_from(Trial).where(counted_trials(job_id))) or 0)


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def record_trial(session: Session, *, job_id: int, number: int, config: dict[str, Any], status: str,
                 samples_ms: Iterable[float] = (), median_ms: float | None = None,
                 spread: dict[str, float] | None = None, error: str | None = None,
                 worker: str | None = None) -> Trial:
    """Insert or replace the trial (job_id, number)."""
    if status not in TRIAL_STATUSES:
        raise ValueError(f"unknown trial status {status!r}")
    values = dict(config=config, status=status, samples_ms=[float(s) for s in samples_ms],
                  median_ms=_finite(median_ms), spread=spread, error=error, worker=worker)
    t = session.scalars(sa.select(Trial).where(Trial.job_id == job_id, Trial.number == number)).first()
    if t is None:
        t = Trial(job_id=job_id, number=number, **values)
        session.add(t)
    else:
        for k, v in values.items():
            setattr(t, k, v)
    session.flush()
    return t


def store_trial(session: Session, *, job_id: int, **trial) -> Trial:
    """`record_trial`, and `jobs.trials_done` set to the count of the job's counted trials, in the
    caller's transaction. The job's row is locked first (an UPDATE: a row lock on PostgreSQL, the
    write lock on SQLite), so when two workers record at once the second one's count sees the
    first one's trial: trials_done always equals the recorded trials, also after the job has
    finished (a sharing worker's last trial)."""
    session.execute(sa.update(Job).where(Job.id == job_id).values(updated_at=utcnow()))
    t = record_trial(session, job_id=job_id, **trial)
    count = sa.select(sa.func.count()).select_from(Trial).where(counted_trials(job_id)).scalar_subquery()
    session.execute(sa.update(Job).where(Job.id == job_id).values(trials_done=count))
    return t


# --- best configs -----------------------------------------------------------------------------

UPSERT_POLICIES = ("latest", "faster")


def upsert_best_config(session: Session, *, kernel_fingerprint: str, kernel_name: str, problem_key: str,
                       gpu_model: str, compute_capability: str, config: dict[str, Any], median_ms: float,
                       default_ms: float | None = None, job_id: int | None = None,
                       policy: str = "latest") -> BestConfig:
    """Store a best config for (kernel fingerprint, problem key, GPU model); returns the row as stored.

    One atomic INSERT … ON CONFLICT DO UPDATE on both SQLite and PostgreSQL, so concurrent writers
    of the same entry cannot lose each other's result. `policy` says which result an existing
    entry keeps:
      "latest"  the new one (a tuning job's winner: the job measured the previous winner too — it
                is enqueued first — so its choice was made knowing it)
      "faster"  the new one only when its median is lower (a result published by a client, measured
                elsewhere: the comparison is all there is); a missing default_ms keeps the stored one
    """
    if policy not in UPSERT_POLICIES:
        raise ValueError(f"unknown upsert policy {policy!r} (one of {', '.join(UPSERT_POLICIES)})")
    values = dict(kernel_fingerprint=kernel_fingerprint, kernel_name=kernel_name, problem_key=problem_key,
                  gpu_model=gpu_model, compute_capability=compute_capability, config=config,
                  median_ms=float(median_ms), default_ms=_finite(default_ms), job_id=job_id, updated_at=utcnow())
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:  # pragma: no cover - only SQLite and PostgreSQL are supported
        raise NotImplementedError(dialect)
    stmt = insert(BestConfig).values(**values)
    new = stmt.excluded
    table = BestConfig.__table__.c
    if policy == "latest":
        update = {k: new[k] for k in ("kernel_name", "compute_capability", "config", "median_ms",
                                      "default_ms", "job_id", "updated_at")}
        where = None
    else:
        update = {k: new[k] for k in ("compute_capability", "config", "median_ms", "job_id", "updated_at")}
        update["default_ms"] = sa.func.coalesce(new.default_ms, table.default_ms)
        where = new.median_ms < table.median_ms
    stmt = stmt.on_conflict_do_update(index_elements=["kernel_fingerprint", "problem_key", "gpu_model"],
                                      set_=update, where=where).returning(BestConfig)
    row = session.scalars(stmt, execution_options={"populate_existing": True}).first()
    if row is None:  # "faster" and the stored entry is at least as fast: it stays, and is the answer
        row = session.scalars(sa.select(BestConfig).where(
            BestConfig.kernel_fingerprint == kernel_fingerprint, BestConfig.problem_key == problem_key,
            BestConfig.gpu_model == gpu_model).execution_options(populate_existing=True)).one()
    return row


def get_best_config(session: Session, *, kernel_fingerprint: str, problem_key: str,
                    gpu_model: str) -> BestConfig | None:
    return session.scalars(sa.select(BestConfig).where(
        BestConfig.kernel_fingerprint == kernel_fingerprint, BestConfig.problem_key == problem_key,
        BestConfig.gpu_model == gpu_model)).first()


def find_best_configs(session: Session, *, kernel_name: str | None = None, kernel_fingerprint: str | None = None,
                      problem_key: str | None = None, gpu_model: str | None = None,
                      limit: int = 100) -> list[BestConfig]:
    q = sa.select(BestConfig)
    if kernel_name is not None:
        q = q.where(BestConfig.kernel_name == kernel_name)
    if kernel_fingerprint is not None:
        q = q.where(BestConfig.kernel_fingerprint == kernel_fingerprint)
    if problem_key is not None:
        q = q.where(BestConfig.problem_key == problem_key)
    if gpu_model is not None:
        q = q.where(BestConfig.gpu_model == gpu_model)
    return list(session.scalars(q.order_by(BestConfig.updated_at.desc()).limit(limit)))
