"""Plug-ins: code outside the compiler that listens to its autotuning events (`knobs.autotuning`).

A distribution declares one under the entry-point group `blocktune.compiler_plugins` (Python's
standard plug-in mechanism, as pytest's `pytest11`), e.g. blocktune's own pyproject.toml:

    [project.entry-points."blocktune.compiler_plugins"]
    service = "client.compiler_plugin:register"

`register(knobs)` is called once per process with the `compiler.knobs` module and adds its
listeners to `knobs.autotuning`. The compiler loads the plug-ins at its first autotuning event,
not at `import compiler`: most processes never autotune, and a plug-in may be slow to import. A
plug-in that fails to load costs one warning and is left out. This is how the tuning service's
client takes part in launches without the compiler naming it (docs/contracts.md).
"""
from __future__ import annotations

import importlib.metadata
import threading
import warnings

from . import knobs

GROUP = "blocktune.compiler_plugins"

_loaded = False
_lock = threading.Lock()


def load() -> None:
    """Register every installed plug-in, once per process."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        for ep in importlib.metadata.entry_points(group=GROUP):
            try:
                ep.load()(knobs)
            except Exception as exc:  # noqa: BLE001 - a broken plug-in must not break launches
                warnings.warn(f"blocktune: compiler plug-in {ep.name!r} ({ep.value}) failed to load "
                              f"({type(exc).__name__}: {exc}); going on without it", RuntimeWarning, stacklevel=2)
        _loaded = True


def autotuning() -> knobs.autotuning_knobs:
    """`knobs.autotuning`, with the plug-ins' listeners registered."""
    load()
    return knobs.autotuning


__all__ = ["GROUP", "load", "autotuning"]
