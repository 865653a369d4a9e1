"""GPU runs of tl.dot_scaled against the float64 MX reference (run by the lead on an H100:
`pytest -m gpu tests/compiler/test_dot_scaled_gpu.py`)."""
from __future__ import annotations

import secrets

import pytest

torch = pytest.importorskip("torch")

from tests.compiler.kernels import dot_scaled as K  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture
def cpu_gen():
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("M,N,Kd,fa,fb,sa,sb,nw", [
    (32, 32, 64, "e2m1", "e4m3", True, False, 4),
    (128, 32, 64, "e2m1", "e4m3", True, False, 4),
    (64, 64, 128, "e4m3", "e2m1", False, True, 4),
    (128, 128, 128, "e5m2", "bf16", True, False, 8),
    (64, 64, 64, "e2m1", "fp16", True, False, 4),
    (128, 64, 256, "e2m1", "e2m1", True, True, 4),
])
def test_matches_the_mx_reference(cpu_gen, M, N, Kd, fa, fb, sa, sb, nw):
    K.run(torch, cpu_gen, "cuda", M, N, Kd, fa, fb, sa, sb, nw)


@pytest.mark.parametrize("fa,fb", [("e5m2", "e2m1"), ("e4m3", "e5m2")])
def test_fp8_operands_may_be_typed(cpu_gen, fa, fb):
    K.run(torch, cpu_gen, "cuda", 128, 64, 128, fa, fb, True, True, 4, typed_fp8=True)


def test_scale_255_is_nan(cpu_gen):
    K.run(torch, cpu_gen, "cuda", 64, 64, 64, "e2m1", "e4m3", True, False, nan_scale=True)
