"""Profiling sessions: proton's `start` / `activate` / `deactivate` / `finalize` / `profile`.

While a session is active, every kernel launch goes through Triton's launch hooks
(knobs.runtime.launch_enter_hook, runtime/launch_hooks.py) and is timed (timers.py) into the
session's tree (data.py) under the scopes open at the time (scope.py). With `hook="triton"` a
kernel's `@jit(launch_metadata=fn)` is evaluated: its `name` becomes a node above the kernel's and
its `flops8/16/32/64`, `flops` and `bytes` are added there, as proton's launch hook does. Without
it a launch is recorded under its kernel's name only.
"""
from __future__ import annotations

import functools
import threading
from typing import Optional

from .. import knobs
from ..runtime import launch_hooks
from ..runtime.jit import interpret_mode
from . import devices
from .data import Node, Tree
from .timers import EventTimers, WallTimer

DEFAULT_PROFILE_NAME = "proton"
LAUNCH_METRICS = tuple(f"flops{w}" for w in (8, 16, 32, 64)) + ("bytes", "flops")
SCOPE_DEVICE_TIME = "(device time)"   # a scope's GPU time when nothing inside it was timed


class Session:
    def __init__(self, sid: int, path: str, hook: Optional[str]):
        self.id = sid
        self.path = path
        self.hook = hook
        self.tree = Tree()
        self.active = True


_sessions: dict[int, Session] = {}
_next_id = 0
_lock = threading.Lock()
_local = threading.local()          # .scopes: open Frames; .launches: timers of launches in flight
_gpu_timers: EventTimers | None = None


class Frame:
    """An open scope: its name, the device-time events started for it, and whether anything
    inside it was timed (then its own events are dropped: the time is in its children)."""
    __slots__ = ("name", "started", "sessions", "covered")

    def __init__(self, name: str):
        self.name = name
        self.started = None
        self.sessions: list[Session] = []
        self.covered = False


def profiling_on() -> bool:
    return bool(_sessions)


def active_sessions() -> list[Session]:
    return [s for s in _sessions.values() if s.active]


def open_frames() -> list[Frame]:
    frames = getattr(_local, "scopes", None)
    if frames is None:
        frames = _local.scopes = []
    return frames


def _path() -> list[str]:
    return [f.name for f in open_frames()]


def _cover_open_frames() -> None:
    for f in open_frames():
        f.covered = True


def _timing_on_gpu() -> bool:
    if interpret_mode():
        return False
    try:
        import torch  # noqa: PLC0415 - optional for the compiler
    except ImportError:
        return False
    return torch.cuda.is_available()


def _gpu() -> EventTimers:
    global _gpu_timers
    if _gpu_timers is None:
        _gpu_timers = EventTimers()
    return _gpu_timers


# -- the launch hook -------------------------------------------------------------------------------

def _on_launch_enter(metadata: launch_hooks.LazyDict) -> None:
    sessions = active_sessions()
    stack = getattr(_local, "launches", None)
    if stack is None:
        stack = _local.launches = []
    if not sessions:
        stack.append(None)
        return
    kernel_name = metadata.data["name"]
    path = _path()
    nodes: list[Node] = []
    lazy = None
    for s in sessions:
        if s.hook == "triton":
            lazy = metadata.get() if lazy is None else lazy
            op = s.tree.node(path + [str(lazy.get("name", kernel_name))])
            op.add_metrics({k: lazy[k] for k in LAUNCH_METRICS if k in lazy})
            nodes.append(op.child(kernel_name))
        else:
            nodes.append(s.tree.node(path + [kernel_name]))
    _cover_open_frames()
    if _timing_on_gpu():
        stack.append((nodes, _gpu().start(metadata.data.get("stream"))))
    else:
        stack.append((nodes, WallTimer()))


def _on_launch_exit(metadata: launch_hooks.LazyDict) -> None:
    entry = _local.launches.pop()
    if entry is None:
        return
    nodes, started = entry
    if isinstance(started, WallTimer):
        started.stop(nodes)
    else:
        _gpu().stop(nodes, started)


def _sync_hooks() -> None:
    """The launch hooks are listened to only while a session is active (the fast launch path
    otherwise)."""
    if active_sessions():
        knobs.runtime.launch_enter_hook.add(_on_launch_enter)
        knobs.runtime.launch_exit_hook.add(_on_launch_exit)
    else:
        knobs.runtime.launch_enter_hook.remove(_on_launch_enter)
        knobs.runtime.launch_exit_hook.remove(_on_launch_exit)


# -- scopes (scope.py's) ----------------------------------------------------------------------------

def scope_enter(name: str, metrics: Optional[dict]) -> Frame:
    frame = Frame(name)
    frame.sessions = active_sessions()
    path = _path() + [name]
    for s in frame.sessions:
        node = s.tree.node(path)
        if metrics:
            node.add_metrics(metrics)
    if frame.sessions and _timing_on_gpu():
        frame.started = _gpu().start()
    open_frames().append(frame)
    return frame


def scope_exit(frame: Frame, metrics: Optional[dict] = None) -> None:
    frames = open_frames()
    if not frames or frames[-1] is not frame:
        raise RuntimeError(f"profiler scope {frame.name!r} exited out of order (scopes must nest)")
    frames.pop()
    path = _path() + [frame.name]
    if metrics:
        for s in active_sessions():
            s.tree.node(path).add_metrics(metrics)
    if frame.started is not None and not frame.covered:
        _gpu().stop([s.tree.node(path + [SCOPE_DEVICE_TIME]) for s in frame.sessions], frame.started)
        _cover_open_frames()
    elif frame.covered:
        _cover_open_frames()


# -- the session API ---------------------------------------------------------------------------------

def _check_options(context, data, backend, mode, hook) -> None:
    if context not in (None, "shadow"):
        raise ValueError(f"context={context!r} is not supported by blocktune's profiler: use 'shadow' (scopes "
                         "opened with proton.scope / enter_scope)")
    if data not in (None, "tree"):
        raise ValueError(f"data={data!r} is not supported by blocktune's profiler: use 'tree' (a .hatchet file)")
    if backend not in (None, "cupti"):
        raise ValueError(f"backend={backend!r} is not supported by blocktune's profiler: use None (CUDA events "
                         "on the GPU, wall time in interpret mode)")
    if mode is not None:
        raise ValueError(f"mode={mode!r} is not supported by blocktune's profiler (no PC sampling)")
    if hook not in (None, "triton", "launch"):
        raise ValueError(f"hook={hook!r}: use None or 'triton'")


def start(name: Optional[str] = None, *, context: Optional[str] = "shadow", data: Optional[str] = "tree",
          backend: Optional[str] = None, mode=None, hook: Optional[str] = None) -> int:
    """Start (and activate) a session that writes `<name>.hatchet` at finalize; returns its id."""
    global _next_id
    _check_options(context, data, backend, mode, hook)
    path = DEFAULT_PROFILE_NAME if name is None else str(name)
    if not path.endswith(".hatchet"):
        path += ".hatchet"
    with _lock:
        sid = _next_id
        _next_id += 1
        _sessions[sid] = Session(sid, path, "triton" if hook in ("triton", "launch") else None)
    _sync_hooks()
    return sid


def _select(session: Optional[int]) -> list[Session]:
    if session is None:
        return list(_sessions.values())
    if session not in _sessions:
        raise ValueError(f"no profiling session {session} (started: {sorted(_sessions)})")
    return [_sessions[session]]


def activate(session: Optional[int] = None) -> None:
    """Record into the session again (None: every session)."""
    for s in _select(session):
        s.active = True
    _sync_hooks()


def deactivate(session: Optional[int] = None) -> None:
    """Stop recording into the session (None: every session); its data stays until finalize."""
    for s in _select(session):
        s.active = False
    _sync_hooks()


def finalize(session: Optional[int] = None, output_format: Optional[str] = "hatchet") -> None:
    """Read the pending GPU timings and write each session's file (None: every session)."""
    if output_format not in ("", None, "hatchet"):
        raise ValueError(f"output_format={output_format!r}: blocktune's profiler writes 'hatchet' files")
    if session is not None and session not in _sessions:
        return
    chosen = _select(session)
    if _gpu_timers is not None:
        _gpu_timers.resolve()
    for s in chosen:
        devices.describe(s.tree)
        s.tree.write(s.path)
        del _sessions[s.id]
    _sync_hooks()


def profile(func=None, *, name: Optional[str] = None, context: Optional[str] = "shadow",
            data: Optional[str] = "tree", backend: Optional[str] = None, mode=None, hook: Optional[str] = None):
    """Decorator: profile every call of `func` in a session of its own (finalize writes it)."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            sid = start(name, context=context, data=data, backend=backend, mode=mode, hook=hook)
            try:
                return fn(*args, **kwargs)
            finally:
                deactivate(sid)
        return wrapper
    return decorate(func) if func is not None else decorate
