"""What a tuning run leaves in its Optuna study, as optuna-dashboard shows it: the real parameter
values, repeated configs recorded as what they are (never as failed trials), and why the search
stopped."""
from __future__ import annotations

import optuna
import sqlalchemy as sa

from db import migrate
from db.engine import make_engine, session_factory
from db.models import Job, Trial
from jobspec.model import JobSpec
from kernels import example
from tuner.engine import run_job
from tuner.submission import create_job_from_spec

TS = optuna.trial.TrialState


def test_the_study_holds_real_values_and_repeats_are_not_failures(sqlite_url):
    spec = example("vector_add", N=3000)
    spec["space"] = {"BLOCK_SIZE": [1024, 2048, 4096], "num_warps": [4]}
    spec["budget"] = {"trials": 3}
    spec["sampler"] = "random"          # random proposals from 3 configs repeat: what this test needs
    spec["lookahead"] = 3               # three asked at once: a config asked twice is in flight
    spec["seed"] = 7
    spec["measure"] = {"remeasure_top": 1, "remeasure_rounds": 1}
    migrate.upgrade(sqlite_url)
    job_id = create_job_from_spec(sqlite_url, JobSpec.model_validate(spec))
    run_job(sqlite_url, job_id, interpret=True)

    engine = make_engine(sqlite_url)
    with session_factory(engine)() as s:
        job = s.get(Job, job_id)
        assert job.state == "succeeded", job.error
        recorded = {t.number: t.config for t in s.scalars(sa.select(Trial).where(Trial.job_id == job_id))}
    engine.dispose()
    assert sorted(c["BLOCK_SIZE"] for c in recorded.values()) == [1024, 2048, 4096]

    study = optuna.load_study(study_name=f"job-{job_id}", storage=sqlite_url)
    by_number = {t.number: t for t in study.trials}
    assert len(study.trials) > len(recorded), "the seed no longer produces a repeated config"
    for t in study.trials:
        assert t.state != TS.FAIL, (t.number, t.user_attrs)
        # what optuna-dashboard shows: the values, not positions in the lists
        assert t.params["BLOCK_SIZE"] in (1024, 2048, 4096) and t.params["num_warps"] == 4
        assert t.params == {k: t.user_attrs["config"][k] for k in t.params}
        if t.number in recorded:
            assert t.state == TS.COMPLETE and t.params == {k: recorded[t.number][k] for k in t.params}
            continue
        # not measured: a repeat of a measured config (its time copied) or a duplicate of one in flight
        twin = by_number[t.user_attrs.get("repeat_of", t.user_attrs.get("duplicate_of"))]
        assert twin.number in recorded and twin.params == t.params, (t.number, t.user_attrs)
        if "repeat_of" in t.user_attrs:
            assert t.state == TS.COMPLETE and t.value == twin.value
        else:
            assert t.state == TS.PRUNED
    assert any(t.state == TS.PRUNED for t in study.trials), "the seed no longer asks a config twice at once"
    assert study.user_attrs["stop_reason:local"] in ("trial budget spent", "search space exhausted")

    # and what optuna-dashboard itself serves to its pages for this study
    import httpx
    import optuna_dashboard

    with httpx.Client(transport=httpx.WSGITransport(app=optuna_dashboard.wsgi(sqlite_url)), base_url="http://dash") as c:
        (summary,) = [st for st in c.get("/api/studies").json()["study_summaries"]
                      if st["study_name"] == f"job-{job_id}"]
        shown = c.get(f"/api/studies/{summary['study_id']}", params={"after": 0}).json()["trials"]
    assert len(shown) == len(study.trials)
    for t in shown:
        values = {p["name"]: p["param_external_value"] for p in t["params"]}
        assert values["BLOCK_SIZE"] in ("1024", "2048", "4096") and values["num_warps"] == "4", values
        assert t["state"] in ("Complete", "Pruned"), t["state"]
        if t["state"] == "Pruned":
            assert any(a["key"] == "duplicate_of" for a in t["user_attrs"])
