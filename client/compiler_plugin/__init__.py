"""The tuning service's plug-in for the compiler: `@autotune` kernels ask the service for their config.

The compiler names no part of the service. This package is registered with it as a plug-in
(pyproject.toml, entry point group `blocktune.compiler_plugins`), which the compiler loads at its
first autotuning event and which adds its listeners to `compiler.knobs.autotuning` (hooks.py):
the service lookup (BLOCKTUNE_SERVICE_URL), publishing (BLOCKTUNE_PUBLISH=1) and job submission
after a miss (BLOCKTUNE_SUBMIT_ON_MISS=1, miss_job.py and grid_exprs.py). The listeners do nothing
while BLOCKTUNE_SERVICE_URL is unset.

This is the one part of `client` that depends on the compiler; client.client, client.lookup and
client.models stand alone (docs/contracts.md).
"""
from __future__ import annotations

from .hooks import config_chosen, before_tuning, forget, launch_missed, service_lookup, wait_for_submissions


def register(knobs) -> None:
    """Entry point: add the service's listeners to the compiler's autotuning events."""
    knobs.autotuning.before_tuning.add(before_tuning)
    knobs.autotuning.launch_missed.add(launch_missed)
    knobs.autotuning.config_chosen.add(config_chosen)


__all__ = ["register", "before_tuning", "launch_missed", "config_chosen", "service_lookup", "wait_for_submissions", "forget"]
