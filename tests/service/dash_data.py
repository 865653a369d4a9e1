"""Rows for the dashboard's tests that go beyond svc_helpers.seed: a job with a real spec and an
Optuna study that has repeats, duplicates and a stop, and best configs near the default's time."""
from __future__ import annotations

import json

import optuna

from db.engine import make_engine, session_factory
from db.models import BestConfig, Job, Kernel, Trial, utcnow

SOURCE = '''import compiler as triton
import compiler.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """out = 2 * x"""
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)
'''

SPEC = {"kernel": {"name": "scale_kernel", "source": SOURCE}, "sizes": {"N": 4096},
        "args": [{"name": "x_ptr", "shape": ["N"], "dtype": "float32"},
                 {"name": "out_ptr", "shape": ["N"], "dtype": "float32", "output": True}, {"name": "n", "value": "N"}],
        "key": ["n"], "grid": ["cdiv(N, BLOCK_SIZE)"], "space": {"BLOCK_SIZE": [1024, 2048, 4096], "num_warps": [4, 8]},
        "budget": {"trials": 8, "patience": 3}}


def story_job(url: str, *, default_ratio: float = 1.001) -> dict:
    """A succeeded job of scale_kernel whose study explains every missing trial number: 0 and 4
    measured, 1 a repeat of 0, 2 a duplicate of 0 (in flight), 3 asked but not run (re-queued as 4),
    5 refused by a constraint; stopped for lack of improvement. Its best config is `default_ratio`
    times faster than the default."""
    engine = make_engine(url)
    try:
        with session_factory(engine)() as s:
            k = Kernel(fingerprint="5" * 64, name="scale_kernel", source=SOURCE, compiler_version="0.1.0")
            s.add(k)
            s.flush()
            now = utcnow()
            job = Job(kernel_id=k.id, gpu_model="NVIDIA H100 80GB HBM3", spec=SPEC, state="succeeded", study_name="x",
                      trials_total=8, trials_done=2, progress=1.0, best_time_ms=0.5,
                      best_config={"BLOCK_SIZE": 2048, "num_warps": 4}, created_at=now, updated_at=now, finished_at=now)
            s.add(job)
            s.flush()
            job.study_name = f"job-{job.id}"
            s.add_all([Trial(job_id=job.id, number=0, config={"BLOCK_SIZE": 1024, "num_warps": 4}, status="ok",
                             samples_ms=[0.6], median_ms=0.6, worker="w1"),
                       Trial(job_id=job.id, number=4, config={"BLOCK_SIZE": 2048, "num_warps": 4}, status="ok",
                             samples_ms=[0.5], median_ms=0.5, worker="w1"),
                       Trial(job_id=job.id, number=5, config={"BLOCK_SIZE": 4096, "num_warps": 8}, status="invalid",
                             samples_ms=[], error="constraint violated: BLOCK_SIZE * num_warps <= 16384", worker="w1")])
            s.add(BestConfig(kernel_fingerprint=k.fingerprint, kernel_name=k.name, problem_key=json.dumps({"n": 4096}),
                             gpu_model="NVIDIA H100 80GB HBM3", compute_capability="9.0",
                             config={"BLOCK_SIZE": 2048, "num_warps": 4}, median_ms=0.5, default_ms=0.5 * default_ratio,
                             job_id=job.id))
            s.commit()
            job_id, kernel_id = job.id, k.id
    finally:
        engine.dispose()

    dists = {"BLOCK_SIZE": optuna.distributions.CategoricalDistribution([1024, 2048, 4096]),
             "num_warps": optuna.distributions.CategoricalDistribution([4, 8])}
    study = optuna.create_study(study_name=f"job-{job_id}", storage=url)

    def add(params, state, value=None, **attrs):
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, state=state, value=value,
                                                  user_attrs={"config": params, **attrs}))

    a, b, c = ({"BLOCK_SIZE": 1024, "num_warps": 4}, {"BLOCK_SIZE": 2048, "num_warps": 4},
               {"BLOCK_SIZE": 4096, "num_warps": 8})
    add(a, optuna.trial.TrialState.COMPLETE, 0.6)
    add(a, optuna.trial.TrialState.COMPLETE, 0.6, repeat_of=0)
    add(a, optuna.trial.TrialState.PRUNED, duplicate_of=0)
    add(b, optuna.trial.TrialState.FAIL)
    add(b, optuna.trial.TrialState.COMPLETE, 0.5, requeued_from=3)
    add(c, optuna.trial.TrialState.COMPLETE, float("inf"))
    study.set_user_attr("stop_reason:w1", "no improvement in 3 trials")
    return {"job_id": job_id, "kernel_id": kernel_id}
