"""`call` ops (frontend/device_calls.py): the device function of a noinline @jit function, lowered
into the kernel's LLVM module as a function of its own (internal, noinline: a `.func` in the PTX
that the kernel reaches with `call`, as Triton's), once per module and shared-memory base.

Its shared memory starts where the caller's is free at the call (Lowering.smem_reserved: above
tiles held across a loop), so the two never meet; the kernel is launched with the larger of the
two ends. Arguments follow the kernel's parameter ABI (i1 as i32, fp16/bf16 as their bits).
"""
from __future__ import annotations

import dataclasses

from llvmlite import ir as ll

from . import dot, fp8
from .llvm_types import I16, I32
from .lowering import Lowering


def lower_call(lw, op) -> None:
    f = _device_function(lw, lw.fn.device_functions[op.attrs["callee"]])
    lw.b.call(f, [_argument(lw, v) for v in op.operands])


def _argument(lw, v):
    x = lw.scalar(v)
    if v.dtype.name == "int1":
        return lw.b.zext(x, I32)
    if v.dtype.name in ("fp16", "bf16"):
        return lw.b.bitcast(x, I16)
    return x


def _device_function(lw, fn) -> ll.Function:
    base = lw.smem_reserved
    key = (fn.name, base)
    f = lw.device_funcs.get(key)
    if f is not None:
        return f
    fp8.check_types(fn, lw.options.target)
    dot.check_dot_shapes(fn)
    if base:   # another entry point for the same function above the caller's held tiles
        fn = dataclasses.replace(fn, name=f"{fn.name}__smem{base}")
    if fn.gpu_refusals:
        raise fn.gpu_refusals[0]
    child = Lowering(fn, lw.options, lw.rules, parent=lw)
    child.smem_reserved = base
    child.run()
    lw.smem_bytes = max(lw.smem_bytes, child.smem_total - lw.smem_reserved)
    lw.needs_sm90a = lw.needs_sm90a or child.needs_sm90a
    lw.device_funcs[key] = child.func
    return child.func
