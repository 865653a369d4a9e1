"""A hostile kernel that reaches a worker (here: configs the submission check does not try) fails
its trials with a clear message — the compiler's own bounds, or the compile pool's CPU-time and
memory limits — and the worker's compile process answers and goes on: the job succeeds."""
from __future__ import annotations

import sqlalchemy as sa

from db import migrate
from db.engine import make_engine, session_factory
from db.models import Job
from jobspec.model import JobSpec
from tuner.engine import run_job
from tuner.submission import create_job_from_spec

# MODE: 0 correct; 1 burns CPU within the compiler's bounds (33k compile-time membership tests of
# 10,000 strings of 1,000 characters: ~10 s); 2 builds 800 MB of compile-time strings; 3 and 4 are
# refused by the compiler's own bounds.
HOSTILE_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def add_hostile(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr, MODE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    if MODE == 1:
        t = ('a' * 1000,) * 10000
        u = 'a' * 999 + 'b'
        for i in tl.static_range(4096):
            for j in tl.static_range(4096):
                found = u in t
    if MODE == 2:
        t = ()
        for i in tl.static_range(4000):
            t = t + (f'{i:>99999}', f'{i:<99999}')
    if MODE == 3:
        for i in tl.static_range(10**7):
            mask = mask & mask
    if MODE == 4:
        X = 9**9**9
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)
'''


def _spec() -> dict:
    return {
        "kernel": {"name": "add_hostile", "source": HOSTILE_SOURCE},
        "sizes": {"N": 1000},
        "args": [
            {"name": "x_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "rand"}},
            {"name": "y_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "rand"}},
            {"name": "out_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "zeros"}},
            {"name": "n_elements", "value": "numel(x_ptr)"},
        ],
        "key": ["n_elements"],
        "grid": ["cdiv(n_elements, BLOCK_SIZE)"],
        "space": {"MODE": [0, 1, 2, 3, 4], "BLOCK_SIZE": [256]},
        "check": {"outputs": ["out_ptr"]},
        "default_config": {"MODE": 0, "BLOCK_SIZE": 256, "num_warps": 4},
        "budget": {"trials": 10},
        "sampler": "brute",
        "measure": {"remeasure_top": 1, "remeasure_rounds": 1, "compile_timeout_s": 120},
    }


def test_hostile_compiles_fail_their_trials_and_the_worker_goes_on(sqlite_url, monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_COMPILE_WORKERS", "1")      # one compile process serves every config
    monkeypatch.setenv("BLOCKTUNE_COMPILE_CPU_S", "2")
    monkeypatch.setenv("BLOCKTUNE_COMPILE_MEMORY_MB", "500")
    migrate.upgrade(sqlite_url)
    job_id = create_job_from_spec(sqlite_url, JobSpec.model_validate(_spec()))
    run_job(sqlite_url, job_id, interpret=True, worker_id="test:cpu0")

    engine = make_engine(sqlite_url)
    try:
        with session_factory(engine)() as s:
            job = s.scalars(sa.select(Job).where(Job.id == job_id)).one()
            assert job.state == "succeeded", job.error
            by_mode = {t.config["MODE"]: t for t in job.trials}
            assert {m: t.status for m, t in by_mode.items()} == {
                0: "ok", 1: "compile-error", 2: "compile-error", 3: "compile-error", 4: "compile-error"}
            # answered by the compile process itself (a dead one would read "the compiler process died")
            assert "compilation exceeded its CPU-time limit of 2 s (BLOCKTUNE_COMPILE_CPU_S)" in by_mode[1].error
            assert "compilation exceeded the compile worker's memory limit of 500 MiB" in by_mode[2].error
            assert "tl.static_range of 10000000 iterations is over the limit of 4096" in by_mode[3].error
            assert "9 ** 387420489 would have about" in by_mode[4].error and "X = 9**9**9" in by_mode[4].error
            assert job.best_config["MODE"] == 0
    finally:
        engine.dispose()
