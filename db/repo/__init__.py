"""The one way into the database: every write of the tuner, the service and the CLI goes through
these functions (reads may query the models directly).

Each function takes a Session and leaves committing to the caller, except the claims, which take
the Engine and are each one transaction of their own.

hardware.py      GPUs and the workers attached to them
credentials.py   API tokens and dashboard sessions (stored hashed)
jobs.py          kernels and jobs: submitted, started, progress, finished (cancelled, failed, succeeded)
claims.py        a worker claiming a job, its lease, giving it back
trials.py        the trials of a job, the count against its budget and its claims on it
best_configs.py  the winners per (kernel, problem key, GPU model); the "latest" / "faster" policies
"""
from __future__ import annotations

from db.repo.best_configs import UPSERT_POLICIES, find_best_configs, get_best_config, upsert_best_config
from db.repo.claims import Claim, claim, find_joinable_job, gpu_worker_alive, release_job, renew_lease
from db.repo.credentials import add_token, end_session, revoke_token, start_session, touch_token
from db.repo.hardware import (Registration, alive_clause, capability_str, get_or_create_gpu, register_worker,
                              set_worker_state)
from db.repo.jobs import (create_job, finish_job, get_or_create_kernel, job_state, start_job, submit_job, succeed_job,
                          update_progress)
from db.repo.trials import (UNCOUNTED_ERROR_PREFIX, claim_trial, count_trials, counted_trials, hold_job_row, record_trial,
                            store_trial)

__all__ = [
    "UPSERT_POLICIES", "find_best_configs", "get_best_config", "upsert_best_config",
    "Claim", "claim", "find_joinable_job", "gpu_worker_alive", "release_job", "renew_lease",
    "add_token", "end_session", "revoke_token", "start_session", "touch_token",
    "Registration", "alive_clause", "capability_str", "get_or_create_gpu", "register_worker", "set_worker_state",
    "create_job", "finish_job", "get_or_create_kernel", "job_state", "start_job", "submit_job", "succeed_job",
    "update_progress",
    "UNCOUNTED_ERROR_PREFIX", "claim_trial", "count_trials", "counted_trials", "hold_job_row", "record_trial",
    "store_trial",
]
