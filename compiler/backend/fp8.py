"""fp8 values and conversions in the NVPTX backend (sm_89+; Triton's conversions on sm_90).

fp8 values live in registers and memory as `i8` bit patterns. LLVM 22 has no fp8 types or
conversion intrinsics, so the conversions are the PTX instructions Triton emits, as inline asm:
  fp8 → f16   cvt.rn.f16x2.e4m3x2 / .e5m2x2 (exact); to f32 / bf16 / f64 from there (exact)
  f32 → fp8   cvt.rn.satfinite.e4m3x2.f32 / .e5m2x2 (nearest even; overflow and ±inf saturate to
              the largest finite value; NaN stays NaN); f16 and bf16 widen to f32 first (exact)
  rtz → e5m2  cvt.rz.f16.f32, then the high byte of the f16 (Triton's fp16 → e5m2 truncation)
Each instruction converts a pair; one element goes in the low half (the other is 0 / ignored).
The rounding-toward-zero casts between the standard float types (fp_downcast_rounding="rtz") are
here too: `cvt.rz.f16.f32`, `cvt.rz.bf16.f32`, `cvt.rz.f32.f64`.
"""
from __future__ import annotations

from llvmlite import ir as ll

from .. import fp8 as fp8_bits
from ..language import dtypes as T
from .errors import BackendError
from .llvm_types import BF16, F16, F32, F64, I8, I16, I32

_PTX_NAME = {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}


def ptx_name(dt) -> str:
    """e4m3 / e5m2: the PTX spelling of a supported fp8 type."""
    name = _PTX_NAME.get(dt.name)
    if name is None:
        raise BackendError(T.unsupported(dt) or f"{dt} is not an fp8 type the NVPTX backend supports")
    return name


def check_types(fn, target: str) -> None:
    """Refuse, at the first op that makes one, the fp8 formats NVIDIA GPUs have no conversions for
    (interpret mode runs them) and fp8 on targets before sm_89."""
    for op in fn.walk_with_dropped():    # an unused value of such a type too, as Triton checks it when made
        for v in op.results:
            dt = v.dtype.element_ty if v.dtype.is_ptr() else v.dtype
            if not dt.is_fp8():
                continue
            why = T.unsupported(dt)
            if why is None and _sm(target) < 89 and not dt.is_fp8e4b15():   # its conversions are integer ops
                why = f"{dt} needs sm_89 or newer (the fp8 conversions and tensor cores); the target is {target}"
            if why:
                raise BackendError(why, op.loc) from ValueError(why)


def _sm(target: str) -> int:
    digits = "".join(ch for ch in (target or "sm_90") if ch.isdigit())
    return int(digits) if digits else 90


def constant(dt, value) -> ll.Constant:
    """An fp8 constant: the bits of `value` rounded as the conversions round (nearest, satfinite)."""
    return ll.Constant(I8, int(fp8_bits.from_float(float(value), dt)))


def _asm(b, ret, text, cons, args):
    return b.asm(ll.FunctionType(ret, [a.type for a in args]), text, cons, args, False)


def to_f16(lw, x, dt):
    b = lw.b
    pair = _asm(b, I32, f"cvt.rn.f16x2.{ptx_name(dt)}x2 $0, $1;", "=r,h", [b.zext(x, I16)])
    return b.bitcast(b.trunc(pair, I16), F16)


def to_float(lw, x, src, dst):
    """fp8 → fp16 / bf16 / fp32 / fp64, exact."""
    h = to_f16(lw, x, src)
    if dst.name == "fp16":
        return h
    f = lw.b.fpext(h, F32)
    if dst.name == "fp32":
        return f
    if dst.name == "fp64":
        return lw.b.fpext(f, F64)
    if dst.name == "bf16":
        return lw.b.fptrunc(f, BF16)  # every fp8 value is a bf16: the rounding is exact
    raise BackendError(f"cannot convert {src} to {dst}")


def from_f32(lw, x, dst, rounding=None):
    """fp32 → fp8 bits, nearest even with satfinite, or toward zero into e5m2."""
    b = lw.b
    if rounding == "rtz":
        if dst.name != "fp8e5":
            raise BackendError(f"fp_downcast_rounding='rtz' to {dst} is not supported (only to tl.float8e5)")
        h = _asm(b, I16, "cvt.rz.f16.f32 $0, $1;", "=h,f", [x])
        return b.trunc(b.lshr(h, ll.Constant(I16, 8)), I8)
    pair = _asm(b, I16, f"cvt.rn.satfinite.{ptx_name(dst)}x2.f32 $0, $1, $2;", "=h,f,f",
                [ll.Constant(F32, 0.0), x])
    return b.trunc(pair, I8)


def cast(lw, x, src, dst, rounding=None):
    """A cast with an fp8 side (the front end lets through float ↔ fp8 and fp8 ↔ fp8 only)."""
    b = lw.b
    if src.is_fp8():
        if not dst.is_fp8():
            return to_float(lw, x, src, dst)
        x, src = b.fpext(to_f16(lw, x, src), F32), T.float32  # exact, then one rounding
    if src.name in ("fp16", "bf16"):
        x = b.fpext(x, F32)
    elif src.name != "fp32":
        raise BackendError(f"cannot convert {src} to {dst}: cast to tl.float32 first")
    return from_f32(lw, x, dst, rounding)


_RZ = {("fp32", "fp16"): ("cvt.rz.f16.f32 $0, $1;", "=h,f", I16, F16),
       ("fp32", "bf16"): ("cvt.rz.bf16.f32 $0, $1;", "=h,f", I16, BF16),
       ("fp64", "fp32"): ("cvt.rz.f32.f64 $0, $1;", "=f,d", F32, F32)}


def round_toward_zero(lw, x, src, dst):
    """A floating-point downcast rounded toward zero (fp64 → fp16/bf16 through fp32: truncating
    twice is truncating once, the fp32 grid holds the narrower ones)."""
    b = lw.b
    if src.name == "fp64" and dst.name in ("fp16", "bf16"):
        x, src = round_toward_zero(lw, x, src, T.float32), T.float32
    key = (src.name, dst.name)
    if key not in _RZ:
        raise BackendError(f"fp_downcast_rounding='rtz' from {src} to {dst} is not supported")
    text, cons, reg, out = _RZ[key]
    v = _asm(b, reg, text, cons, [x])
    return v if reg == out else b.bitcast(v, out)
