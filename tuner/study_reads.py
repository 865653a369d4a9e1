"""What a sharing worker reads of the job's Optuna study on every trial, in one light query each,
straight from Optuna's tables (its RDB storage's schema, in the job's database): the trials in
flight anywhere, one trial's state, the configs other workers are measuring.

Through Optuna's storage each of these is a sync of its cache (optuna.storages._CachedStorage):
every unfinished trial of the study read again whole — its params, values and attributes, five
more queries and an object per row — and a study shared by two workers has twice as many trials
in flight as one worker's (each worker's lookahead; a result stays RUNNING until its tell is
written behind). These reads take only the columns they need; the writes stay Optuna's.
"""
from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db.models import Trial

trials = sa.table("trials", sa.column("trial_id"), sa.column("number"), sa.column("study_id"), sa.column("state"))
_user_attrs = sa.table("trial_user_attributes", sa.column("trial_id"), sa.column("key"), sa.column("value_json"))


def state_is(name: str):
    # Optuna stores TrialState by name (a native enum on PostgreSQL: compared as text)
    return sa.cast(trials.c.state, sa.String) == name


def in_flight(session: Session, study_id: int, job_id: int) -> tuple[list[tuple[int, int]], int]:
    """The study's RUNNING trials without a recorded result, as (trial id, number), and how many
    trials wait in its queue (enqueued configs)."""
    recorded = sa.exists().where(Trial.job_id == job_id, Trial.number == trials.c.number)
    running = session.execute(sa.select(trials.c.trial_id, trials.c.number)
                              .where(trials.c.study_id == study_id, state_is("RUNNING"), ~recorded)).all()
    waiting = session.scalar(sa.select(sa.func.count()).select_from(trials)
                             .where(trials.c.study_id == study_id, state_is("WAITING")))
    return [(int(i), int(n)) for i, n in running], int(waiting or 0)


def trial_state(session: Session, trial_id: int, *, lock: bool = False) -> str | None:
    """The trial's state's name (RUNNING, COMPLETE, ...), None if there is no such trial. `lock`:
    its row locked until the transaction ends (PostgreSQL: Optuna changes a trial's state under the
    same row lock, so the state stays what was read; SQLite ignores it — there the caller holds
    the database's write lock already)."""
    query = sa.select(sa.cast(trials.c.state, sa.String)).where(trials.c.trial_id == trial_id)
    state = session.scalar(query.with_for_update() if lock else query)
    return None if state is None else str(state)


def running_configs(session: Session, study_id: int) -> list[tuple[int, str | None, dict[str, Any]]]:
    """The study's RUNNING trials whose config is set: (number, worker, config)."""
    config = _user_attrs.alias("config_attr")
    worker = _user_attrs.alias("worker_attr")
    rows = session.execute(
        sa.select(trials.c.number, worker.c.value_json, config.c.value_json)
        .join(config, sa.and_(config.c.trial_id == trials.c.trial_id, config.c.key == "config"))
        .outerjoin(worker, sa.and_(worker.c.trial_id == trials.c.trial_id, worker.c.key == "worker"))
        .where(trials.c.study_id == study_id, state_is("RUNNING"))).all()
    return [(int(n), json.loads(w) if w is not None else None, json.loads(c)) for n, w, c in rows]
