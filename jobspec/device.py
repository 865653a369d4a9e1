"""The device as a job sees it: the names its constraints may use, and the CPU interpreter's stand-in.

A constraint (`"BLOCK_M * BLOCK_K * 2 * num_stages <= max_shared_memory"`) sees the properties of
the device it is tuned on under the names of DEVICE_NAMES (`device_env`).

Interpret mode tunes on the CPU interpreter. Its results are stored under the GPU model
INTERPRETER_MODEL, and its constraints see INTERPRETER_LIMITS: an H100's limits, so that a spec's
constraints select the same configs on the CPU as on the GPU it is meant for. These numbers are no
description of the CPU; `interpreter_properties()` spells them as `device_properties()` does (with
compute capability 0.0, which no GPU has) for the tuner, the worker that registers it and lookups
made in interpret mode.
"""
from __future__ import annotations

from typing import Any, Mapping

DEVICE_NAMES = ("max_shared_memory", "sm_count", "l2_size", "total_memory", "cc_major", "cc_minor", "warp_size")

INTERPRETER_MODEL = "blocktune interpreter (CPU)"
INTERPRETER_LIMITS = {"sm_count": 132, "total_memory": 80 * 2**30, "max_shared_memory": 232448,
                      "l2_size": 50 * 2**20}


def interpreter_properties() -> dict[str, Any]:
    """The interpreter's "device properties" (a fresh dict), in `device_properties()`'s form."""
    return {"name": INTERPRETER_MODEL, "capability": (0, 0), "driver_version": "", "cuda_version": "",
            **INTERPRETER_LIMITS}


def device_env(props: Mapping[str, Any]) -> dict[str, Any]:
    """Device properties under the names constraints use."""
    cap = props.get("capability") or (0, 0)
    if isinstance(cap, str):
        cap = tuple(int(x) for x in cap.split("."))
    return {"max_shared_memory": int(props.get("max_shared_memory") or 0), "sm_count": int(props.get("sm_count") or 0),
            "l2_size": int(props.get("l2_size") or 0), "total_memory": int(props.get("total_memory") or 0),
            "cc_major": int(cap[0]), "cc_minor": int(cap[1]), "warp_size": 32}
