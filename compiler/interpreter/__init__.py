"""The interpreter backend: runs block IR on the CPU over numpy.

    from compiler import interpreter
    interpreter.run(fn, grid=(4, 1, 1), args=[x, y, n])

`run` compiles the `ir.Function` once into a list of Python closures (cached per function object)
and executes it for every program id of the grid, in order (x fastest, then y, then z). Straight-line
kernels (no loops/ifs, atomics, print or assert) instead run a chunk of programs at once, every value
carrying a leading program axis (`BLOCKTUNE_INTERPRET_VECTORIZE=0` turns that off). Values are
numpy scalars/arrays: integers wrap at their bit width, fp16 is numpy float16, bf16 is held in
float32 and rounded to bf16 (round-to-nearest-even) after every op and on load/store, pointers are
int64 byte addresses into the buffers passed as arguments (numpy arrays or torch CPU tensors).

Memory (memory.py): every array/tensor argument registers the whole allocation it lives in, so
views, strides and offsets work as on the GPU; an active lane outside them is an `IndexError`
naming the kernel source location.

Two interpreters share the op semantics: program.py's `Program` runs the programs one by one;
vectorized.py's `VectorizedProgram` (a `Program` whose values carry a leading program axis) runs
straight-line kernels a chunk of programs at a time. `compile_function` picks one.
"""
from __future__ import annotations

import threading
import weakref

from .. import ir, knobs
from .program import InterpreterError, Program
from .values import bf16_round  # noqa: F401  (tests compare against it)
from .vectorized import VectorizedProgram

__all__ = ["run", "interpret_mode", "InterpreterError", "compile_function", "Program", "VectorizedProgram"]


def interpret_mode() -> bool:
    """True when `BLOCKTUNE_INTERPRET` or `TRITON_INTERPRET` is set to 1/true/yes/on (knobs.runtime.interpret)."""
    return knobs.runtime.interpret


_cache: dict[int, tuple] = {}
_cache_lock = threading.Lock()


def _vectorize_enabled() -> bool:
    return knobs.runtime.interpret_vectorize


def compile_function(fn: ir.Function, vectorize: bool | None = None) -> Program:
    """The compiled form of `fn` (cached while `fn` is alive). With `vectorize` (default: on unless
    BLOCKTUNE_INTERPRET_VECTORIZE=0), straight-line kernels run all programs of a chunk at once."""
    if vectorize is None:
        vectorize = _vectorize_enabled()
    key = (id(fn), bool(vectorize))
    hit = _cache.get(key)
    if hit is not None and hit[0]() is fn:
        return hit[1]
    prog = VectorizedProgram(fn) if vectorize and VectorizedProgram.eligible(fn) else Program(fn)
    with _cache_lock:
        try:
            ref = weakref.ref(fn, lambda _r, k=key, c=_cache: c.pop(k, None))
        except TypeError:
            return prog
        _cache[key] = (ref, prog)
    return prog


def run(fn: ir.Function, grid, args: list) -> None:
    """Execute `fn` once per program id of `grid` (1 to 3 sizes) with `args` (see module doc)."""
    compile_function(fn).launch(grid, args)
