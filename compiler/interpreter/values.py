"""The interpreter's values: the numpy dtype of each IR type, bf16 and tf32 rounding, casts and
bitcasts, and integer arithmetic with the GPU's semantics (wrap-around, truncating division).

Values are numpy scalars/arrays: integers wrap at their bit width, fp16 is numpy float16, bf16 is
held in float32 and rounded to bf16 (round-to-nearest-even) after every op and on load/store,
pointers are int64 byte addresses.
"""
from __future__ import annotations

import math

import numpy as np

from .. import fp8
from ..errors import CompilationError
from ..language import dtypes as T
from ..language.dtypes import pointer_type


class InterpreterError(RuntimeError):
    """The IR handed to the interpreter is malformed (a compiler bug), or it cannot run it."""


class InterpretedCompilationError(CompilationError, InterpreterError):
    """A kernel that does not compile, launched in interpret mode: Triton's interpreter reports it
    as an InterpreterError, the GPU path as a CompilationError; this is both, so code written for
    either catches it."""


def _np(dt):
    """The numpy dtype holding values of scalar type `dt` (pointers: int64; bf16: float32)."""
    return np.dtype(np.int64) if isinstance(dt, pointer_type) else dt.np


def _mem_np(dt):
    """The numpy dtype of one element of type `dt` as stored in memory."""
    if isinstance(dt, pointer_type):
        return np.dtype(np.int64)
    if dt is T.bfloat16:
        return np.dtype(np.uint16)
    if dt is T.int1:
        return np.dtype(np.uint8)
    return dt.np


def bf16_round(x):
    """Round float32 values to the nearest bf16 (ties to even), kept in float32. NaN stays NaN."""
    a = np.asarray(x, dtype=np.float32)
    u = a.view(np.uint32)
    r = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
    r = np.where(np.isnan(a), u | np.uint32(0x00400000), r).astype(np.uint32)
    out = r.view(np.float32)
    return out if out.shape else out[()]


def bf16_to_bits(x):
    """float32 values (already bf16-representable, or not: they are rounded) → uint16 bits."""
    r = np.asarray(bf16_round(x), dtype=np.float32)
    return (r.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def bits_to_bf16(u):
    return (np.asarray(u).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _tf32_round(x):
    """Round float32 to tf32 (10 mantissa bits), to nearest with ties away, as cvt.rna.tf32.f32."""
    a = np.ascontiguousarray(x, dtype=np.float32)
    u = a.view(np.uint32)
    r = ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).astype(np.uint32)
    r = np.where(np.isfinite(a), r, u).astype(np.uint32)
    return r.view(np.float32)


def _scalar_from_py(value, dt):
    """A Python/numpy number as a numpy scalar of type `dt` (ints wrap to the bit width)."""
    if isinstance(dt, pointer_type):
        return np.int64(_wrap_int(int(value), 64, True))
    if dt.is_bool():
        return np.bool_(bool(value))
    if dt.is_int():
        return dt.np.type(_wrap_int(int(value), dt.primitive_bitwidth, dt.is_int_signed()))
    if dt.is_floating():
        if dt is T.bfloat16:
            return bf16_round(np.float32(float(value)))
        if fp8.is_fp8(dt):
            return np.uint8(fp8.from_float(float(value), dt))
        return dt.np.type(float(value))
    raise InterpreterError(f"cannot make a constant of type {dt}")


def _wrap_int(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    if signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _float_to_int(x, dst):
    """Truncate toward zero, saturating at the range of `dst`; NaN → 0 (as cvt.rzi on the GPU)."""
    info = np.iinfo(dst.np)
    y = np.trunc(np.asarray(x, dtype=np.float64))
    nan = np.isnan(y)
    lo, hi = float(info.min), float(info.max)
    out = np.where(nan, 0.0, np.clip(y, lo, hi))
    res = np.where(out >= 2.0 ** (dst.primitive_bitwidth - (1 if dst.is_int_signed() else 0)),
                   0, out).astype(dst.np)
    if dst.primitive_bitwidth == 64:  # float(2**63-1) rounds up to 2**63: saturate explicitly
        res = np.where(out >= 2.0 ** (63 if dst.is_int_signed() else 64), info.max, res).astype(dst.np)
    return res if res.shape else res[()]


def cast_value(x, src, dst, rounding=None):
    """Numeric conversion with the IR's `cast` semantics; `rounding="rtz"` truncates a floating-point
    downcast (Triton's fp_downcast_rounding; None and "rtne" round to nearest even)."""
    if src == dst:
        return x
    if isinstance(src, pointer_type) or isinstance(dst, pointer_type):
        if isinstance(dst, pointer_type):
            return np.asarray(x).astype(np.int64)[()] if np.ndim(x) == 0 else np.asarray(x).astype(np.int64)
        if dst.is_bool():
            return np.not_equal(x, 0)
        return np.asarray(x).astype(dst.np) if np.ndim(x) else np.asarray(x).astype(dst.np)[()]
    if dst.is_bool():
        return np.not_equal(x, 0)
    if fp8.is_fp8(src):
        return cast_value(fp8.to_float32(x, src), T.float32, dst)  # exact: every fp8 value is an fp32
    if fp8.is_fp8(dst):
        return fp8.from_float(np.asarray(x, dtype=np.float64), dst, rounding or "rtne")
    if dst.is_floating():
        if dst is T.bfloat16:
            y = bf16_round(np.asarray(x).astype(np.float32))
        else:
            y = np.asarray(x).astype(dst.np)
        if rounding == "rtz" and src.is_floating():
            y = _toward_zero(np.asarray(x), np.asarray(y), dst)
        return y if y.shape else y[()]
    # dst is an integer
    if src.is_floating():
        return _float_to_int(x, dst)
    y = np.asarray(x).astype(dst.np)  # int → int wraps; sign- or zero-extends by the source's sign
    return y if y.shape else y[()]


def _toward_zero(x, nearest, dst):
    """`nearest` (x rounded to nearest in dst) moved one step toward zero where it rounded away from
    zero: x rounded toward zero (finite overflow gives the largest finite value, inf stays inf)."""
    away = np.abs(nearest.astype(np.float64)) > np.abs(x.astype(np.float64))
    if not np.any(away):
        return nearest
    if dst is T.bfloat16:  # held in float32: one bf16 step is 1 << 16 in the float32 bits
        bits = nearest.astype(np.float32).view(np.uint32)
        step = np.where(away, bits - np.uint32(1 << 16), bits).astype(np.uint32)
        return step.view(np.float32)
    return np.where(away, np.nextafter(nearest, np.zeros_like(nearest)), nearest).astype(nearest.dtype)


def bitcast_value(x, src, dst):
    if src == dst:
        return x
    sb = 64 if isinstance(src, pointer_type) else src.primitive_bitwidth
    db = 64 if isinstance(dst, pointer_type) else dst.primitive_bitwidth
    if sb != db:
        raise InterpreterError(f"bitcast between types of different widths: {src} → {dst}")
    a = np.ascontiguousarray(x).reshape(np.shape(x))  # ascontiguousarray makes scalars 1-D
    if src is T.bfloat16:
        a = bf16_to_bits(a)
    else:
        a = a.astype(_mem_np(src), copy=False)
    if dst is T.bfloat16:
        y = bits_to_bf16(a.view(np.uint16))
    elif dst is T.int1:
        y = a.view(np.uint8) != 0
    else:
        y = a.view(_np(dst))
    return y if y.shape else y[()]


def _trunc_div(a, b):
    """C integer division (truncates toward zero). Division by zero gives all ones (-1)."""
    a = np.asarray(a)
    b = np.asarray(b)
    zero = b == 0
    bs = np.where(zero, 1, b).astype(b.dtype)
    r = np.fmod(a, bs)
    q = ((a - r) // bs).astype(a.dtype)
    q = np.where(zero, np.array(-1).astype(a.dtype), q).astype(a.dtype)
    return q if q.shape else q[()]


def _int_rem(a, b):
    a = np.asarray(a)
    b = np.asarray(b)
    zero = b == 0
    r = np.fmod(a, np.where(zero, 1, b).astype(b.dtype))
    r = np.where(zero, a, r).astype(a.dtype)
    return r if r.shape else r[()]


def _umulhi(a, b, dt):
    """The high half of the unsigned double-width product (PTX mul.hi.u32/u64), whatever the
    signedness of `dt`: Triton's tl.umulhi is __nv_umulhi / __nv_umul64hi."""
    bits = dt.primitive_bitwidth
    unsigned = np.dtype(f"uint{bits}") if bits in (8, 16, 32, 64) else None
    ua = np.asarray(a).astype(unsigned) if unsigned is not None else np.asarray(a)
    ub = np.asarray(b).astype(unsigned) if unsigned is not None else np.asarray(b)
    if bits <= 32:
        r = ((ua.astype(np.uint64) * ub.astype(np.uint64)) >> np.uint64(bits)).astype(unsigned).astype(dt.np)
    else:
        # 64×64 → 128 bits from 32-bit halves, vectorized (numpy has no 128-bit integers)
        m32 = np.uint64(0xFFFFFFFF)
        s32 = np.uint64(32)
        ua, ub = np.broadcast_arrays(ua, ub)
        a_lo, a_hi = ua & m32, ua >> s32
        b_lo, b_hi = ub & m32, ub >> s32
        lo_lo = a_lo * b_lo
        hi_lo = a_hi * b_lo
        lo_hi = a_lo * b_hi
        hi_hi = a_hi * b_hi
        cross = (lo_lo >> s32) + (hi_lo & m32) + lo_hi
        r = (hi_hi + (hi_lo >> s32) + (cross >> s32)).astype(dt.np)
    return r if r.shape else r[()]


def _erf(x):
    a = np.asarray(x)
    try:
        import torch  # noqa: PLC0415 - torch is optional (and slow to import): only when erf is asked for
        r = torch.special.erf(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))).numpy()
    except ImportError:  # pragma: no cover - torch is optional
        r = np.vectorize(math.erf, otypes=[np.float64])(a.astype(np.float64))
    r = r.astype(a.dtype)
    return r if r.shape else r[()]


def _fma(a, b, c, dt):
    if dt is T.float64:
        return np.add(np.multiply(a, b), c)
    r = np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64) + np.asarray(c, dtype=np.float64)
    r = r.astype(_np(dt))
    return r if r.shape else r[()]


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def _float_binary(name):
    return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "fdiv": np.true_divide,
            "rem": np.fmod, "maximum": np.fmax, "minimum": np.fmin,
            "maximum_nan": np.maximum, "minimum_nan": np.minimum}.get(name)


def _int_binary(name, dt):
    if dt.is_bool():
        table = {"add": np.bitwise_xor, "sub": np.bitwise_xor, "mul": np.bitwise_and,
                 "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
                 "maximum": np.bitwise_or, "minimum": np.bitwise_and,
                 "maximum_nan": np.bitwise_or, "minimum_nan": np.bitwise_and,
                 "div": lambda a, b: a, "rem": lambda a, b: np.bitwise_and(a, False)}
        return table.get(name)
    table = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _trunc_div, "rem": _int_rem,
             "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
             "maximum": np.maximum, "minimum": np.minimum, "maximum_nan": np.maximum,
             "minimum_nan": np.minimum}
    if name in table:
        return table[name]
    bits = dt.primitive_bitwidth
    if name == "shl":
        def shl(a, b):
            return np.where((np.asarray(b) >= bits) | (np.asarray(b) < 0), 0, np.left_shift(a, b)).astype(dt.np)[()] \
                if np.ndim(a) == 0 and np.ndim(b) == 0 else \
                np.where((np.asarray(b) >= bits) | (np.asarray(b) < 0), 0, np.left_shift(a, b)).astype(dt.np)
        return shl
    if name == "shr":
        fill_signed = dt.is_int_signed()

        def shr(a, b):
            bb = np.asarray(b)
            big = (bb >= bits) | (bb < 0)
            r = np.right_shift(a, np.where(big, 0, bb).astype(bb.dtype))
            if fill_signed:
                r = np.where(big, np.where(np.asarray(a) < 0, -1, 0), r).astype(dt.np)
            else:
                r = np.where(big, 0, r).astype(dt.np)
            return r if r.shape else r[()]
        return shr
    return None


_UNARY_FLOAT = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "log": np.log,
                "log2": np.log2, "sqrt": np.sqrt, "rsqrt": _rsqrt, "sin": np.sin, "cos": np.cos,
                "floor": np.floor, "ceil": np.ceil, "erf": _erf, "tanh": np.tanh}
_UNARY_INT = {"neg": np.negative, "not": np.invert, "abs": np.abs}
_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal}


# ---------------------------------------------------------------------------------------------
