"""Helpers for the GPU tests (marked `gpu`): a fresh CUDA generator per test, random inputs on the
device, outputs poisoned with NaN or a sentinel before the launch."""
from __future__ import annotations

import secrets

import pytest
import torch

DEV = "cuda"


@pytest.fixture
def gen():
    """A fresh CUDA generator per test; the seed is printed so a failure can be replayed."""
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    return torch.Generator(device=DEV).manual_seed(seed)


def rand(g, shape, dtype, lo=-1.0, hi=1.0):
    """Uniform floats in [lo, hi), integers in [lo, hi], on the GPU."""
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, device=DEV, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    return torch.randint(int(lo), int(hi) + 1, shape, generator=g, device=DEV, dtype=torch.int64).to(dtype)


def poisoned(shape, dtype):
    """A GPU buffer of NaN (floats) or a sentinel (ints) so unwritten elements show."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), device=DEV, dtype=dtype)
    return torch.full(shape, 77 if dtype == torch.uint8 else -123456 % (1 << 7) if dtype == torch.int8 else -123456,
                      device=DEV, dtype=dtype)
