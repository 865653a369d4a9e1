"""Triton's launch hooks: `knobs.runtime.launch_enter_hook` / `launch_exit_hook` around a launch,
each called with the launch's `LazyDict` (`name`, `function`, `stream`, and what the kernel's
`@jit(launch_metadata=fn)` returns — computed only when a hook calls `.get()`).

A launch takes this path only while a hook has a listener (JITFunction.__getitem__ / run check it),
so the fast path (the C binder) costs nothing more without one.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from .. import knobs


class LazyDict:
    """Triton's `triton.compiler.LazyDict`: a dict whose extra entries are computed on `get()`."""

    def __init__(self, data: dict):
        self.data = data
        self.extras: list = []

    def get(self) -> dict:
        for func, args in self.extras:
            self.data = self.data | func(*args)
        self.extras.clear()
        return self.data

    def add(self, func: Callable, args: tuple) -> None:
        self.extras.append((func, args))


class KernelInfo(NamedTuple):
    """What `launch_metadata(grid, kernel, args)` gets as `kernel` (Triton passes the compiled
    kernel's metadata; tutorials read `kernel.name`)."""
    name: str
    num_warps: int
    num_stages: int


def active() -> bool:
    return bool(knobs.runtime.launch_enter_hook) or bool(knobs.runtime.launch_exit_hook)


def bind_arguments(arg_names: list[str], defaults: dict, args: tuple, kwargs: dict) -> dict:
    """name → value of every kernel parameter of a `kernel[grid](*args, **kwargs)` call."""
    named = dict(zip(arg_names, args))
    for n in arg_names[len(args):]:
        if n in kwargs:
            named[n] = kwargs[n]
        elif n in defaults:
            named[n] = defaults[n]
    return named


def resolve_grid(grid, named: dict, num_warps: int, num_stages: int) -> tuple:
    if callable(grid):
        grid = grid({**named, "num_warps": num_warps, "num_stages": num_stages})
    if isinstance(grid, int):
        grid = (grid,)
    return tuple(grid)


def launch(fn_name: str, launch_metadata: Callable | None, grid: tuple, stream: Any, named: dict,
           num_warps: int, num_stages: int, do_launch: Callable[[], Any]):
    """Call the enter hooks, `do_launch()`, then the exit hooks (also when the launch raised)."""
    if not all(g > 0 for g in grid):
        return do_launch()
    md = LazyDict({"name": fn_name, "function": None, "stream": stream})
    if launch_metadata is not None:
        md.add(launch_metadata, (grid, KernelInfo(fn_name, num_warps, num_stages), named))
    knobs.runtime.launch_enter_hook(md)
    try:
        return do_launch()
    finally:
        knobs.runtime.launch_exit_hook(md)


__all__ = ["LazyDict", "KernelInfo", "active", "bind_arguments", "resolve_grid", "launch"]
