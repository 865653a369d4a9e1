"""What a job's Optuna study says beyond tuning_trials: the trials asked but not measured (repeats,
duplicates, stops) and why each run stopped. Read straight from Optuna's tables (the study lives in
the service's database), with only the user attributes the dashboard explains."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

# the attributes the tuner sets on a trial that was not measured, or not measured as itself
TRIAL_ATTRS = ("repeat_of", "duplicate_of", "in_flight_elsewhere", "requeued_from", "known_good",
               "untried_after_repeats")

_studies = sa.table("studies", sa.column("study_id"), sa.column("study_name"))
_trials = sa.table("trials", sa.column("trial_id"), sa.column("number"), sa.column("study_id"), sa.column("state"))
_trial_attrs = sa.table("trial_user_attributes", sa.column("trial_id"), sa.column("key"), sa.column("value_json"))
_study_attrs = sa.table("study_user_attributes", sa.column("study_id"), sa.column("key"), sa.column("value_json"))


@dataclass
class StudyTrial:
    number: int
    state: str                      # Optuna's: COMPLETE, PRUNED, FAIL, RUNNING, WAITING
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class StudyRecord:
    trials: list[StudyTrial]
    stop_reasons: dict[str, str]    # runner name → why its search stopped


def _value(text: str | None) -> Any:
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return text


def read_study(session: Session, study_name: str) -> StudyRecord | None:
    """The study's trials and stop reasons; None when there is no such study (a job no worker has
    started, or a database without Optuna's tables yet)."""
    if not sa.inspect(session.get_bind()).has_table("trials"):
        return None
    study_id = session.scalar(sa.select(_studies.c.study_id).where(_studies.c.study_name == study_name))
    if study_id is None:
        return None
    rows = session.execute(sa.select(_trials.c.trial_id, _trials.c.number, _trials.c.state)
                           .where(_trials.c.study_id == study_id).order_by(_trials.c.number)).all()
    by_id = {tid: StudyTrial(number, str(state).rsplit(".", 1)[-1]) for tid, number, state in rows}
    attrs = session.execute(sa.select(_trial_attrs.c.trial_id, _trial_attrs.c.key, _trial_attrs.c.value_json)
                            .join(_trials, _trials.c.trial_id == _trial_attrs.c.trial_id)
                            .where(_trials.c.study_id == study_id, _trial_attrs.c.key.in_(TRIAL_ATTRS))).all()
    for tid, key, value in attrs:
        if tid in by_id:
            by_id[tid].attrs[key] = _value(value)
    stops = session.execute(sa.select(_study_attrs.c.key, _study_attrs.c.value_json)
                            .where(_study_attrs.c.study_id == study_id,
                                   _study_attrs.c.key.like("stop\\_reason:%", escape="\\"))).all()
    return StudyRecord(trials=sorted(by_id.values(), key=lambda t: t.number),
                       stop_reasons={k.split(":", 1)[1]: str(_value(v)) for k, v in stops if _value(v)})
