"""tl.dot_scaled on GPUs without block-scaled MMA (sm_80, sm_90): Triton's emulation, built from
block ops. Each mx operand is upcast to bf16 (fp16 when the other operand is fp16) — e2m1 nibbles
and fp8 values (typed fp8e4nv/fp8e5 or their uint8 bytes, as Triton takes them) convert exactly — and multiplied by its scale, 2**(scale - 127) per 32 elements
along K (a power of two: exact; a scale of 255 is NaN); then an ordinary tl.dot accumulates in fp32.
The same composition runs in interpret mode and through the NVPTX backend."""
from __future__ import annotations

from ..language import dtypes as T
from . import semantic as S
from .semantic import SemanticError, is_value

FORMATS = ("e2m1", "e4m3", "e5m2", "bf16", "fp16")
_FP8 = {"e4m3": T.float8e4nv, "e5m2": T.float8e5}
SCALE_GROUP = 32


def dot_scaled(b, lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc, fast_math, lhs_k_pack, rhs_k_pack,
               out_dtype):
    for name, fmt in (("lhs_format", lhs_format), ("rhs_format", rhs_format)):
        if fmt not in FORMATS:
            raise SemanticError(f"tl.dot_scaled: {name} must be one of {list(FORMATS)}, got {fmt!r}")
    if not (lhs_k_pack and rhs_k_pack):
        raise SemanticError("tl.dot_scaled with e2m1 packed along M or N (lhs_k_pack/rhs_k_pack=False) is not "
                            "supported by blocktune; pack the two e2m1 values of a byte along K")
    if out_dtype != T.float32:
        raise SemanticError(f"tl.dot_scaled accumulates in fp32: out_dtype must be tl.float32, got {out_dtype}")
    comp = T.float16 if "fp16" in (lhs_format, rhs_format) else T.bfloat16
    a = _upcast(b, lhs, lhs_scale, lhs_format, comp, "lhs")
    # rhs is [K, N] with its scale [N, K // 32]: upcast it as [N, K] and transpose back
    bt = _upcast(b, S.trans(b, rhs), rhs_scale, rhs_format, comp, "rhs")
    bm = S.trans(b, bt)
    if a.shape[-1] != bm.shape[0]:
        raise SemanticError(f"tl.dot_scaled: lhs has K = {a.shape[-1]} and rhs has K = {bm.shape[0]} after unpacking "
                            f"({lhs_format} × {rhs_format})")
    return S.dot(b, a, bm, acc, "ieee" if comp == T.float16 else None, None, None, T.float32)


def _upcast(b, x, scale, fmt, comp, side):
    """x: [R, K] (or [R, K // 2] bytes of e2m1) → [R, K] in `comp`, scaled."""
    if not is_value(x) or len(x.shape) != 2:
        raise SemanticError(f"tl.dot_scaled: {side} must be a 2-D block, got {S._describe(x)}")
    if fmt in ("bf16", "fp16"):
        typed = T.bfloat16 if fmt == "bf16" else T.float16
        if x.dtype == T.uint16:     # Triton takes the 16-bit patterns too
            x = S.cast(b, x, typed, bitcast=True)
        if x.dtype != typed:
            raise SemanticError(f"tl.dot_scaled: {side} of format {fmt!r} must be a {fmt} (or uint16) block, got {x.dtype}")
        v = S.cast(b, x, comp)
    else:
        # fp8 formats come as their fp8 type (Triton's) or as the uint8 bytes of it; e2m1 as bytes
        typed = _FP8.get(fmt)
        if x.dtype != T.uint8 and x.dtype != T.int8 and (typed is None or x.dtype != typed):
            what = f"{typed} or uint8" if typed is not None else "uint8 bytes (two values a byte)"
            raise SemanticError(f"tl.dot_scaled: {side} of format {fmt!r} must be {what}, got {x.dtype}")
        x = S.cast(b, x, T.uint8, bitcast=True)
        v = _e2m1_to(b, x, comp) if fmt == "e2m1" else S.cast(b, S.cast(b, x, _FP8[fmt], bitcast=True), comp)
    if scale is None:
        return v
    rows, k = v.shape
    want = (rows, k // SCALE_GROUP)
    if k % SCALE_GROUP:
        raise SemanticError(f"tl.dot_scaled: K = {k} of {side} is not a multiple of the scale group ({SCALE_GROUP})")
    if not is_value(scale) or tuple(scale.shape) != want:   # Triton's words
        got = [str(d) for d in scale.shape] if is_value(scale) else S._describe(scale)
        raise SemanticError(f"{side}_scale must be a tensor of shape {list(want)}. Got {got}")
    if scale.dtype != T.uint8:
        raise SemanticError(f"tl.dot_scaled: {side}_scale must be uint8 (e8m0 exponents), got {scale.dtype}")
    factor = _e8m0_to(b, scale, comp)                              # [R, K // 32]
    grouped = S.reshape(b, v, (rows, k // SCALE_GROUP, SCALE_GROUP))
    factor = S.broadcast_to(b, S.expand_dims(b, factor, 2), grouped.shape)
    scaled = S.reshape(b, S.mul(b, grouped, factor), (rows, k))
    nan_scale = S.broadcast_to(b, S.expand_dims(b, S.compare(b, "eq", scale, 255), 2), grouped.shape)
    return S.where(b, S.reshape(b, nan_scale, (rows, k)), float("nan"), scaled)


def _e8m0_to(b, scale, comp):
    """2**(scale - 127) in `comp` (bf16: the exponent bits as they are; fp16 through fp32)."""
    if comp == T.bfloat16:
        return S.cast(b, S.shl(b, S.cast(b, scale, T.uint16), 7), T.bfloat16, bitcast=True)
    as_f32 = S.cast(b, S.shl(b, S.cast(b, scale, T.uint32), 23), T.float32, bitcast=True)
    return S.cast(b, as_f32, T.float16)


def _e2m1_to(b, x, comp):
    """Bytes of two e2m1 values (low nibble first along K) → [R, 2 * K/2] in `comp`: the sign, the
    exponent rebiased, the subnormal ±0.5 and zero, as bit patterns of the 16-bit type."""
    m_bits, bias = (7, 127) if comp == T.bfloat16 else (10, 15)
    half = 0x3F00 if comp == T.bfloat16 else 0x3800

    def nibble(n):
        em = S.cast(b, S.and_(b, n, 0x7), T.uint16)
        bits = S.or_(b, S.shl(b, em, m_bits - 1), S.shl(b, S.cast(b, S.and_(b, n, 0x8), T.uint16), 12))
        normal = S.compare(b, "ne", S.and_(b, em, 0x6), 0)
        bits = S.where(b, normal, S.add(b, bits, (bias - 1) << m_bits), bits)
        sub = S.compare(b, "eq", em, 1)
        bits = S.where(b, sub, S.or_(b, S.and_(b, bits, 0x8000), half), bits)
        return bits

    lo = nibble(S.and_(b, x, 0xF))
    hi = nibble(S.shr(b, x, 4))
    joined = S.join(b, lo, hi)                                    # [R, K/2, 2]
    rows, packed = x.shape
    return S.cast(b, S.reshape(b, joined, (rows, 2 * packed)), comp, bitcast=True)
