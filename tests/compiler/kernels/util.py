"""Helpers for the interpret-mode tests: the env fixture, fresh random inputs, poisoned outputs."""
from __future__ import annotations

import secrets

import numpy as np
import pytest
import torch

from .modes import interpret  # noqa: F401 - re-exported: the tests import their fixtures from here

TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
         "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8,
         "u32": torch.uint32, "i1": torch.bool}
SENTINEL = {torch.int8: -77, torch.int16: -7777, torch.int32: -123456789, torch.int64: -1234567890123,
            torch.uint8: 0xA5, torch.uint32: 0xDEADBEEF, torch.bool: True}
# (rtol, atol) for comparing a kernel's result with a float32/float64 reference
TOL = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1e-2), torch.float32: (1.3e-6, 1e-5),
       torch.float64: (1e-12, 1e-12)}


@pytest.fixture
def gen():
    """A fresh torch generator per test; the seed is printed so a failure can be replayed."""
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    g = torch.Generator().manual_seed(seed)
    return g


def rand(g, shape, dtype, lo=-1.0, hi=1.0):
    """Random values of `dtype`: uniform floats in [lo, hi), integers in [lo, hi]."""
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype == torch.uint32:
        return torch.randint(int(lo), int(hi) + 1, shape, generator=g, dtype=torch.int64).to(torch.uint32)
    return torch.randint(int(lo), int(hi) + 1, shape, generator=g, dtype=torch.int64).to(dtype)


def poisoned(shape, dtype):
    """An output buffer filled with NaN (floats) or a sentinel (ints) so unwritten elements show."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.full(shape, SENTINEL[dtype], dtype=dtype) if dtype != torch.uint32 else \
        torch.full(shape, SENTINEL[dtype], dtype=torch.int64).to(torch.uint32)


def is_poisoned(t) -> bool:
    """Every element still holds the poison of `poisoned` (NaN or the sentinel)."""
    if t.dtype.is_floating_point:
        return bool(torch.isnan(t).all())
    return bool((t.to(torch.int64) == poisoned((1,), t.dtype).to(torch.int64)).all())


def assert_close(actual, expected, dtype=None):
    """Compare with a tolerance fitting the storage dtype of `actual`; NaNs must match."""
    dtype = dtype or actual.dtype
    if not dtype.is_floating_point:
        assert torch.equal(actual.to(torch.int64), expected.to(torch.int64)), f"\n{actual}\n!=\n{expected}"
        return
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(actual.to(torch.float64), expected.to(torch.float64), rtol=rtol, atol=atol,
                               equal_nan=True)


def as_np(t):
    return t.numpy() if t.dtype != torch.bfloat16 else t.float().numpy()


__all__ = ["TORCH", "TOL", "interpret", "gen", "rand", "poisoned", "is_poisoned", "assert_close", "as_np", "np"]
