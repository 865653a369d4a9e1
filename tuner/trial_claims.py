"""The trial budget of a job shared by several workers, kept exact trial by trial in the database,
without a job-wide lock around Optuna.

A worker asks Optuna for a trial on its own (Optuna's RDB storage makes each ask one transaction,
safe beside other workers' asks), settles its config (a constraint violation, a repeat of a result,
a twin of a config in flight: none of these is measured) and, before measuring it, claims it
(`claim`, db.repo.claim_trial): one short transaction that locks the job's row (as storing a result
does, db.repo.store_trial), counts what the budget holds — the counted trials recorded in
`tuning_trials` and the claimed trials in flight (still RUNNING in the study, no result recorded) —
and admits the trial only if one more fits. Two workers racing for the budget's last place take
the row one after the other: the second counts the first's claim and is refused (its trial goes
back: JobStudy.give_back).

A claim is never given back by a write: it holds a place only while its trial is RUNNING or
recorded. A trial failed before its result — its worker died (heartbeats, tuner/study.py) or
stopped, or the job was re-claimed — leaves RUNNING, and its place is free for its config,
re-queued, or any other. A worker that dies between its claim and its result leaves a RUNNING trial
with a heartbeat (recorded before the claim, JobStudy.suggest), which the same heartbeats fail.
"""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from db import repo
from db.models import TrialClaim
from tuner.study_reads import state_is, trials


def claim(session: Session, *, job_id: int, study_trial_id: int, number: int, worker: str | None,
          budget: int) -> bool:
    """Admit the trial to the job's budget of `budget` trials, in the caller's transaction (db.repo.claim_trial):
    False when the budget is spent or held by other claims."""
    running = sa.exists().where(trials.c.trial_id == TrialClaim.study_trial_id, state_is("RUNNING"))
    return repo.claim_trial(session, job_id=job_id, number=number, study_trial_id=study_trial_id, worker=worker,
                            budget=budget, running=running)
