"""`call` ops (frontend/device_calls.py): the device function of a noinline @jit function, lowered
into the kernel's LLVM module as a function of its own (internal, noinline: a `.func` in the PTX
that the kernel reaches with `call`, as Triton's), once per module and shared-memory base.

Its shared memory starts where the caller's is free at the call (Lowering.smem_reserved: above
tiles held across a loop), so the two never meet; the kernel is launched with the larger of the
two ends. Arguments and returned values follow the kernel's parameter ABI (i1 as i32, fp16/bf16
as their bits); several returned values come back as a struct.
"""
from __future__ import annotations

import dataclasses

from llvmlite import ir as ll

from . import dot, fp8
from .llvm_types import GPTR, I16, I32, lty
from .lowering import Lowering


def lower_call(lw, op) -> None:
    f = _device_function(lw, lw.fn.device_functions[op.attrs["callee"]])
    out = lw.b.call(f, [to_abi(lw.b, lw.scalar(v), v.dtype) for v in op.operands])
    if len(op.results) == 1:
        lw.vals[op.result.id] = from_abi(lw.b, out, op.result.dtype)
    for i, r in enumerate(op.results if len(op.results) > 1 else ()):
        lw.vals[r.id] = from_abi(lw.b, lw.b.extract_value(out, i), r.dtype)


def lower_return(lw, op) -> None:
    """A device function's return of its values (packed in a struct when several)."""
    b = lw.b
    vals = [to_abi(b, lw.scalar(v), v.dtype) for v in op.operands]
    if len(vals) == 1:
        b.ret(vals[0])
        return
    agg = ll.Constant(lw.func.function_type.return_type, ll.Undefined)
    for i, v in enumerate(vals):
        agg = b.insert_value(agg, v, i)
    b.ret(agg)


def return_type(fn) -> ll.Type:
    """The LLVM return type of a device function: void, its value's ABI type, or a struct of them."""
    types = [abi_type(t) for t in fn.result_types]
    if not types:
        return ll.VoidType()
    return types[0] if len(types) == 1 else ll.LiteralStructType(types)


def abi_type(t) -> ll.Type:
    """How a scalar crosses a call, as a kernel parameter does: i1 as i32, fp16/bf16 as their bits."""
    if t.is_ptr():
        return GPTR
    if t.name == "int1":
        return I32
    if t.name in ("fp16", "bf16"):
        return I16
    return lty(t)


def to_abi(b, x, t):
    if t.name == "int1":
        return b.zext(x, I32)
    if t.name in ("fp16", "bf16"):
        return b.bitcast(x, I16)
    return x


def from_abi(b, x, t):
    if t.name == "int1":
        return b.icmp_unsigned("!=", x, ll.Constant(I32, 0))
    if t.name in ("fp16", "bf16"):
        return b.bitcast(x, lty(t))
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
    child = Lowering(fn, lw.options, lw.rules, parent=lw, parent_return_type=return_type)
    child.smem_reserved = base
    child.run()
    lw.smem_bytes = max(lw.smem_bytes, child.smem_total - lw.smem_reserved)
    lw.needs_sm90a = lw.needs_sm90a or child.needs_sm90a
    lw.device_funcs[key] = child.func
    return child.func
