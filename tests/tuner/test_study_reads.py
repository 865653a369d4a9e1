"""tuner/study_reads.py reads Optuna's tables directly: what it returns must be what Optuna's own
storage says (the same study, trials in every state, some recorded in tuning_trials), on SQLite and
on PostgreSQL (where the trial state is a native enum)."""
from __future__ import annotations

import optuna

from db import migrate, repo
from db.engine import make_engine, session_factory
from jobspec.model import JobSpec
from kernels import example
from tuner import study_reads
from tuner.submission import create_job_from_spec

TS = optuna.trial.TrialState


def test_reads_match_optunas_view(database_url):
    migrate.upgrade(database_url)
    spec = example("vector_add", N=3000)
    job_id = create_job_from_spec(database_url, JobSpec.model_validate(spec))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(database_url)
    study = optuna.create_study(study_name=f"job-{job_id}", storage=storage, sampler=optuna.samplers.RandomSampler(0))
    study_id = storage.get_study_id_from_name(f"job-{job_id}")
    trials = []
    for i in range(6):
        t = study.ask()
        t.suggest_categorical("BLOCK_SIZE", [256, 512, 1024, 2048])
        t.set_user_attr("worker", "left" if i % 2 else "right")
        t.set_user_attr("config", {"BLOCK_SIZE": t.params["BLOCK_SIZE"], "i": i})
        trials.append(t)
    study.tell(trials[0], 1.0)                               # finished
    study.tell(trials[1], state=TS.FAIL)                     # finished
    study.enqueue_trial({"BLOCK_SIZE": 512})                 # waiting
    study.enqueue_trial({"BLOCK_SIZE": 1024})                # waiting
    no_config = study.ask()                                  # pops a waiting trial: running, no config yet
    engine = make_engine(database_url)
    Session = session_factory(engine)
    with Session.begin() as s:                               # trial 2 has its result stored, not yet told
        repo.store_trial(s, job_id=job_id, number=trials[2].number, config={"BLOCK_SIZE": 1}, status="ok",
                         samples_ms=[1.0], median_ms=1.0, spread=None, error=None, worker="left")
    try:
        with Session() as s:
            running, waiting = study_reads.in_flight(s, study_id, job_id)
            states = {t._trial_id: study_reads.trial_state(s, t._trial_id) for t in trials + [no_config]}
            configs = study_reads.running_configs(s, study_id)
            missing = study_reads.trial_state(s, 10_000)
    finally:
        engine.dispose()

    optuna_view = {t._trial_id: t for t in study.get_trials(deepcopy=False)}
    expected_running = {(t._trial_id, t.number) for t in optuna_view.values()
                        if t.state == TS.RUNNING and t.number != trials[2].number}
    assert set(running) == expected_running and len(running) == 4      # trials 3, 4, 5 and the popped one
    assert waiting == sum(1 for t in optuna_view.values() if t.state == TS.WAITING) == 1
    assert states == {i: optuna_view[i].state.name for i in states}
    assert missing is None
    expected_configs = {(t.number, t.user_attrs["worker"], tuple(sorted(t.user_attrs["config"].items())))
                        for t in optuna_view.values() if t.state == TS.RUNNING and "config" in t.user_attrs}
    assert {(n, w, tuple(sorted(c.items()))) for n, w, c in configs} == expected_configs
    assert len(configs) == 4                                  # trials 2-5: the popped one has no config
