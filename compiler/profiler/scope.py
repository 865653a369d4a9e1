"""proton's scopes: `scope(name, metrics)` (a context manager and a decorator), `enter_scope` /
`exit_scope`, and `cpu_timed_scope` (adds the host time as `cpu_time (ns)(exc)`). Scopes nest per
thread; outside a started session they record nothing."""
from __future__ import annotations

import time
from functools import wraps
from typing import Optional, Union

from . import session as profile

MetricValueType = Union[float, int]


class scope:
    def __init__(self, name: str, metrics: Optional[dict[str, MetricValueType]] = None) -> None:
        self.name = name
        self.metrics = metrics
        self.frame = None

    def _enter_scope(self):
        if profile.profiling_on():
            self.frame = profile.scope_enter(self.name, self.metrics)

    def _exit_scope(self, metrics=None):
        frame, self.frame = self.frame, None
        if frame is not None:
            profile.scope_exit(frame, metrics)

    def __enter__(self):
        self._enter_scope()
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self._exit_scope()

    def __call__(self, func):
        @wraps(func)
        def wrapper(*args, **kwargs):
            inner = type(self)(self.name, self.metrics)
            inner._enter_scope()
            try:
                return func(*args, **kwargs)
            finally:
                inner._exit_scope()
        return wrapper


class cpu_timed_scope(scope):
    def __init__(self, name: str, metrics: Optional[dict[str, MetricValueType]] = None) -> None:
        if metrics and "cpu_time" in metrics:
            raise ValueError("The metric name 'cpu_time' is reserved.")
        super().__init__(name, metrics)
        self.start_time = None

    def _enter_scope(self):
        self.start_time = time.perf_counter_ns()
        super()._enter_scope()

    def _exit_scope(self, metrics=None):
        elapsed = time.perf_counter_ns() - self.start_time
        super()._exit_scope({**(metrics or {}), "cpu_time (ns)(exc)": elapsed})


def enter_scope(name: str, *, metrics: Optional[dict[str, MetricValueType]] = None):
    """Open a scope that `exit_scope` closes (the innermost one); returns it, or None when no
    session is started."""
    if not profile.profiling_on():
        return None
    return profile.scope_enter(name, metrics)


def exit_scope(name: Optional[str] = None, *, metrics: Optional[dict[str, MetricValueType]] = None):
    if not profile.profiling_on():
        return None
    frames = profile.open_frames()
    if not frames:
        raise RuntimeError("exit_scope() without an open scope")
    if name and name != frames[-1].name:
        raise ValueError(f"Scope name mismatch: {name} != {frames[-1].name}")
    frame = frames[-1]
    profile.scope_exit(frame, metrics)
    return frame
