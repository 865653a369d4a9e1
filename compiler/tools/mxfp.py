"""`triton.tools.mxfp`: host-side tensors of the OCP microscaling (MX) element and scale formats.

  * MXFP4Tensor: 4-bit E2M1 floats (sign, 2 exponent bits with bias 1, 1 mantissa bit), one per
    uint8 in `.data` (bits 0b SEEM), packed two per byte for kernels with `to_packed_tensor`.
  * MXScaleTensor: 8-bit E8M0 block scales (a biased power-of-two exponent, 255 = NaN).

The names, arguments and encodings are Triton's, so tests and kernels written for Triton build
their MX inputs and float references the same way. Like Triton's module this one works on torch
tensors (on any device), so it imports torch; nothing else in `compiler` imports this module.
Reference: https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf
"""
from __future__ import annotations

import math

import torch

from ..errors import ArgumentError

# |value| of the E2M1 codes 0b0EEM, in code order: subnormals 0 and 0.5, then (1 + M/2) * 2**(E-1).
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E8M0_BIAS = 127
E8M0_NAN = 255


def _shape(size) -> tuple:
    return tuple(size) if isinstance(size, (tuple, list, torch.Size)) else (size, )


def _require_float32(dtype, what: str) -> None:
    if dtype != torch.float32:
        raise ArgumentError(f"{what} converts to torch.float32 only, got {dtype}")


class _MXTensor:
    """`Cls(data=float32 tensor)` encodes the values; `Cls(size=..., device=...)` makes an empty one
    for `.random()`. `.data` holds one code per uint8."""

    def __init__(self, data=None, size=None, device=None):
        self.device = device
        if data is not None:
            if not isinstance(data, torch.Tensor):
                raise TypeError(f"{type(self).__name__}: data must be a torch tensor, got {type(data).__name__}")
            self.device = data.device
            self.size = tuple(data.shape)
            self.data = self._from_float(data)
        elif size is not None:
            self.size = _shape(size)
        else:
            raise ValueError(f"{type(self).__name__} needs either data or size")

    def _from_float(self, values):
        raise NotImplementedError


class MXFP4Tensor(_MXTensor):
    """FP4 E2M1 data: `MXFP4Tensor(data=floats)` rounds float32 values to E2M1 (ties to even,
    magnitudes past 6 and Inf/NaN clamp to ±6, the sign kept); `MXFP4Tensor(size=..., device=...)
    .random()` draws uniformly among the 16 codes."""

    def random(self):
        """Fill `.data` with uniformly random E2M1 codes (every code is a finite number)."""
        self.data = torch.randint(0, 16, size=self.size, dtype=torch.uint8, device=self.device)
        return self

    def to(self, dtype):
        """The E2M1 values as a float32 tensor (code 0b1000 is -0.0)."""
        _require_float32(dtype, "MXFP4Tensor.to")
        table = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=self.data.device)
        magnitude = table[(self.data & 0x7).long()]
        negative = ((self.data >> 3) & 0x1).bool()
        return torch.where(negative, -magnitude, magnitude)

    def _from_float(self, values):
        values = values.float()
        sign = torch.signbit(values).to(torch.uint8)
        magnitude = values.abs()
        magnitude = torch.where(torch.isnan(magnitude) | torch.isinf(magnitude),
                                torch.full_like(magnitude, E2M1_MAGNITUDES[-1]), magnitude)
        # The midpoints between neighbouring codes: the code is how many midpoints lie below the
        # value, and a value on a midpoint goes to the even code (mantissa bit 0) of the two.
        midpoints = torch.tensor([(a + b) / 2 for a, b in zip(E2M1_MAGNITUDES, E2M1_MAGNITUDES[1:])],
                                 dtype=torch.float32, device=values.device)
        code = torch.bucketize(magnitude, midpoints, right=False)
        on_midpoint = midpoints[code.clamp(max=len(midpoints) - 1)] == magnitude
        code = code + (on_midpoint & (code % 2 == 1)).long()
        return ((sign << 3) | code.to(torch.uint8)).to(torch.uint8)

    def to_packed_tensor(self, dim):
        """Two codes per uint8 along `dim`: element 2i in the low nibble, 2i+1 in the high one; an
        odd length is padded with a zero code at the end."""
        data = self.data
        if not 0 <= dim < data.ndim:
            raise ArgumentError(f"to_packed_tensor: dim {dim} is out of range for a {data.ndim}-D tensor")
        if data.shape[dim] % 2:
            pad_shape = list(data.shape)
            pad_shape[dim] = 1
            data = torch.cat([data, data.new_zeros(pad_shape)], dim=dim)
        pairs = data.unflatten(dim, (data.shape[dim] // 2, 2))
        low, high = pairs.select(dim + 1, 0), pairs.select(dim + 1, 1)
        return (high << 4) | low

    def unpack_packed_tensor(self, packed_tensor, dim, original_shape):
        """The inverse of `to_packed_tensor`: one code per uint8, cut back to `original_shape[dim]`."""
        low = packed_tensor & 0xF
        high = (packed_tensor >> 4) & 0xF
        data = torch.stack((low, high), dim=dim + 1).flatten(dim, dim + 1)
        return data.narrow(dim, 0, original_shape[dim]).to(torch.uint8)


class MXScaleTensor(_MXTensor):
    """E8M0 scales: `MXScaleTensor(data=floats)` keeps floor(log2(x)) + 127 clamped to [0, 254] of each
    positive finite x (anything else is the NaN code 255); `MXScaleTensor(size=...).random(low,
    high)` draws uniformly among the powers of two in [low, high] (default: all 255 finite
    codes), never NaN."""

    def random(self, low=None, high=None):
        # Triton truncates log2 of both bounds; ceil/floor agree with it on powers of two and keep
        # every scale inside [low, high] otherwise.
        lowest = 0 if low is None else max(0, math.ceil(math.log2(low)) + E8M0_BIAS)
        highest = 254 if high is None else min(254, max(0, math.floor(math.log2(high)) + E8M0_BIAS))
        if lowest > highest:
            raise ArgumentError(f"MXScaleTensor.random: low ({low}) must not exceed high ({high})")
        self.data = torch.randint(lowest, highest + 1, size=self.size, dtype=torch.uint8, device=self.device)
        return self

    def to(self, dtype):
        """2**(code - 127) as float32, NaN for code 255."""
        _require_float32(dtype, "MXScaleTensor.to")
        exponent = self.data.to(torch.float32) - E8M0_BIAS
        value = torch.pow(2.0, exponent)
        return torch.where(self.data == E8M0_NAN, torch.full_like(value, float("nan")), value)

    def _from_float(self, values):
        values = values.float()
        invalid = torch.isnan(values) | torch.isinf(values) | (values <= 0)
        # frexp gives x = m * 2**e with m in [0.5, 1): floor(log2(x)) is exactly e - 1, with no
        # rounding of log2 just below a power of two.
        _, exponent = torch.frexp(torch.where(invalid, torch.ones_like(values), values))
        code = (exponent.to(torch.int32) - 1 + E8M0_BIAS).clamp(0, 254).to(torch.uint8)
        return torch.where(invalid, torch.full_like(code, E8M0_NAN), code)
