"""Every switch the tuner reads from the environment (pydantic-settings, `BLOCKTUNE_*`).

| field | variable | default | |
|---|---|---|---|
| compile_workers | BLOCKTUNE_COMPILE_WORKERS | 0 | compile processes; 0: this worker's share of the CPUs (usable_cpus() / host_workers) - 1, at most 8 |
| host_workers | BLOCKTUNE_HOST_WORKERS | 1 | tuning workers on this host (one per GPU in a fleet): they share its CPUs |
| compile_nice | BLOCKTUNE_COMPILE_NICE | 5 | how much lower the compile processes' CPU priority is than the worker's (0: the same) |
| compile_memory_mb | BLOCKTUNE_COMPILE_MEMORY_MB | 8192 | a compile process's address space (RLIMIT_AS); 0: none |
| compile_cpu_s | BLOCKTUNE_COMPILE_CPU_S | 300 | one compile's CPU time (RLIMIT_CPU); 0: none |
| tuner_cubin | BLOCKTUNE_TUNER_CUBIN | on | assemble configs to cubins in the compile pool (off: ship PTX, the driver JITs it) |
| child_torch | BLOCKTUNE_CHILD_TORCH | off | the GPU child builds inputs and times with torch instead of numpy and the driver API |

They are read when a run or a compile process needs them (`tuner_settings()`), so a change of the
environment counts from the next run; the compile processes and the GPU child inherit it. The
compiler's own switches (BLOCKTUNE_PTXAS, BLOCKTUNE_INTERPRET, ...) are in compiler/knobs.py.
"""
from __future__ import annotations

import os

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class TunerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BLOCKTUNE_", extra="ignore")

    compile_workers: int = Field(default=0, ge=0, le=256)
    host_workers: int = Field(default=1, ge=1, le=256)
    compile_nice: int = Field(default=5, ge=0, le=19)
    compile_memory_mb: int = Field(default=8192, ge=0)
    compile_cpu_s: int = Field(default=300, ge=0)
    tuner_cubin: bool = True
    child_torch: bool = False


def tuner_settings() -> TunerSettings:
    """The settings as the environment says now."""
    return TunerSettings()


def usable_cpus() -> int:
    """The CPUs this process can keep busy: those it may run on (its affinity: a taskset's or a
    cpuset's share of the host), capped by its cgroup's CPU quota (a container's CPU limit,
    tuner/cpu_quota.py)."""
    from tuner.cpu_quota import cpus_allowed

    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    return cpus_allowed(affinity)
