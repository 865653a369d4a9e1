"""What a worker runs on: a GPU, or the CPU interpreter (interpret mode).

A CPU worker registers under the "GPU model" INTERPRETER_MODEL (the name interpret mode's results
are stored under), but it is no GPU: it has no compute capability, SMs or GPU memory, and the API
and the dashboard say so (kind "cpu", those fields null or "—") instead of showing made-up numbers.
"""
from __future__ import annotations

from typing import Any, Literal

from jobspec.device import INTERPRETER_MODEL

DeviceKind = Literal["gpu", "cpu"]
CPU_LABEL = "CPU (interpreter)"


def device_kind(model: str | None) -> DeviceKind:
    return "cpu" if model == INTERPRETER_MODEL else "gpu"


def device_label(model: str | None) -> str:
    """How a worker's device reads in messages: the GPU model, or "CPU (interpreter)"."""
    if model is None:
        return "no device registered"
    return CPU_LABEL if device_kind(model) == "cpu" else model


def cpu_worker_properties() -> dict[str, Any]:
    """What a CPU worker registers (db.repo.get_or_create_gpu): the model name and nothing a GPU
    would have (the compute capability column is not nullable: "0.0" stands for none)."""
    return {"name": INTERPRETER_MODEL, "capability": (0, 0), "sm_count": 0, "total_memory": 0,
            "driver_version": "", "cuda_version": ""}
