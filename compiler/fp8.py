"""Bit-exact fp8 conversions (numpy has no fp8 types): the interpreter's casts and the constants
both backends fold.

Each format is a 256-entry table of the exact value of every bit pattern. Encoding rounds to the
nearest representable value, ties to even (or toward zero with `rounding="rtz"`), and saturates
finite overflow and infinities to the largest finite value as PTX's `cvt.rn.satfinite.e4m3x2.f32`
/ `.e5m2x2` do on sm_89+ (Triton's conversions on sm_90); NaN stays NaN. `rtz` keeps infinities,
as Triton's fp16 → e5m2 truncation does.

Formats (Triton's names): fp8e4nv = OCP e4m3fn (bias 7, no infinities, NaN S.1111.111),
fp8e5 = OCP e5m2 (bias 15, IEEE-style infinities and NaNs), fp8e4b15 = e4m3 with bias 15 as
Triton converts it on NVIDIA GPUs (no infinities or NaN: S.1111.111 is ±1.875; encoding goes
through fp16 rounded toward zero, then clamps to ±1.75 and rounds half up, as
frontend/semantic.py's conversions do), fp8e4b8 / fp8e5b16 = AMD's "fnuz" formats (bias 8 / 16,
no infinities, no negative zero, NaN is 0x80 alone).
"""
from __future__ import annotations

import math

import numpy as np

# name → (exponent bits, mantissa bits, bias, style)
FORMATS = {"fp8e4nv": (4, 3, 7, "fn"), "fp8e5": (5, 2, 15, "ieee"), "fp8e4b15": (4, 3, 15, "finite"),
           "fp8e4b8": (4, 3, 8, "fnuz"), "fp8e5b16": (5, 2, 16, "fnuz")}


def is_fp8(dt) -> bool:
    return getattr(dt, "name", None) in FORMATS


def _decode_bits(bits: int, fmt) -> float:
    ebits, mbits, bias, style = fmt
    sign = -1.0 if bits & 0x80 else 1.0
    e, m = (bits >> mbits) & ((1 << ebits) - 1), bits & ((1 << mbits) - 1)
    if style == "fnuz" and bits == 0x80:
        return math.nan
    if style == "fn" and e == (1 << ebits) - 1 and m == (1 << mbits) - 1:
        return math.nan
    if style == "ieee" and e == (1 << ebits) - 1:
        return sign * math.inf if m == 0 else math.nan
    if e == 0:
        return sign * math.ldexp(m, 1 - bias - mbits)
    return sign * math.ldexp((1 << mbits) + m, e - bias - mbits)


class _Codec:
    def __init__(self, name):
        fmt = FORMATS[name]
        self.style = fmt[3]
        self.values = np.array([_decode_bits(b, fmt) for b in range(256)], dtype=np.float32)
        pos = self.values[:128]
        # the non-negative finite values, ascending with their codes (code order is value order)
        self.max_code = int(np.flatnonzero(np.isfinite(pos))[-1])
        self.finite = pos[:self.max_code + 1].astype(np.float64)
        self.nan_code = 0x80 if self.style == "fnuz" else 0x7F
        self.inf_code = 0x7C if self.style == "ieee" else None

    def decode(self, bits):
        return self.values[np.asarray(bits, dtype=np.uint8)]

    def encode(self, x, rounding: str = "rtne"):
        if self.style == "finite":
            return _e4b15_encode(x)
        a = np.asarray(x, dtype=np.float64)
        mag = np.abs(a)
        # hi: the first finite value ≥ mag; lo: the one below it
        hi = np.minimum(np.searchsorted(self.finite, mag, side="left"), self.max_code)
        lo = np.maximum(hi - 1, 0)
        exact = self.finite[hi] == mag
        if rounding == "rtz":
            code = np.where(exact | (mag > self.finite[-1]), hi, lo)
        else:
            dlo, dhi = mag - self.finite[lo], self.finite[hi] - mag
            code = np.where(exact, hi, np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi))))
            code = np.where(mag >= self.finite[-1], self.max_code, code)  # satfinite, ±inf included
        code = code.astype(np.uint8)
        if rounding == "rtz" and self.inf_code is not None:
            code = np.where(np.isinf(a), np.uint8(self.inf_code), code)
        if self.style == "fnuz":
            out = np.where(code == 0, np.uint8(0), code | np.where(np.signbit(a), np.uint8(0x80), np.uint8(0)))
        else:
            out = code | np.where(np.signbit(a), np.uint8(0x80), np.uint8(0))
        out = np.where(np.isnan(a), np.uint8(self.nan_code), out).astype(np.uint8)
        return out if out.shape else out[()]


def _e4b15_encode(x):
    """Triton's GPU conversion to e4b15 from the float32 value: fp16 rounded toward zero, |x|
    clamped to 1.75 (NaN too), its bits' low byte after `<< 1` rounded half up, the sign kept."""
    with np.errstate(over="ignore"):   # past fp16's range: inf, stepped back to 65504 below
        f = np.asarray(x, dtype=np.float32)
        h = f.astype(np.float16)
    away = np.abs(h.astype(np.float64)) > np.abs(f.astype(np.float64))
    h = np.where(away, np.nextafter(h, np.float16(0)), h).astype(np.float16)
    bits = h.view(np.uint16).astype(np.uint32)
    mag = np.minimum(bits & 0x7FFF, 0x3F00)
    out = (((mag << 1) + 0x80) >> 8) | ((bits >> 8) & 0x80)
    out = out.astype(np.uint8)
    return out if out.shape else out[()]


_CODECS: dict[str, _Codec] = {}


def codec(dt) -> _Codec:
    name = getattr(dt, "name", dt)
    if name not in _CODECS:
        _CODECS[name] = _Codec(name)
    return _CODECS[name]


def to_float32(bits, dt):
    """fp8 bit patterns (uint8) → their exact float32 values."""
    out = codec(dt).decode(bits)
    return out if np.ndim(bits) else out[()]


def from_float(x, dt, rounding: str = "rtne"):
    """Float values (any numpy float type, exact in float64) → fp8 bit patterns (uint8)."""
    return codec(dt).encode(x, rounding)
