"""tl.dot_scaled (microscaled e2m1/e4m3/e5m2 operands with e8m0 scales, or bf16/fp16), emulated as
Triton does on Hopper: interpret mode against a float64 torch reference of the MX formats, the
kernels through the NVPTX backend and ptxas, and the refusals. GPU runs: test_dot_scaled_gpu.py."""
from __future__ import annotations

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler import ptxas
from compiler.errors import CompilationError
from tests.compiler.kernels import dot_scaled as K
from tests.compiler.kernels.util import gen, interpret  # noqa: F401

CASES = [  # M, N, K, lhs format, rhs format, lhs scaled, rhs scaled
    (32, 32, 64, "e2m1", "e4m3", True, False),
    (64, 32, 64, "e4m3", "e2m1", False, True),
    (32, 64, 128, "e5m2", "bf16", True, False),
    (32, 32, 64, "e2m1", "fp16", True, False),
    (32, 32, 64, "e2m1", "e2m1", True, True),
    (16, 16, 32, "bf16", "e5m2", False, True),
]


@pytest.mark.parametrize("M,N,Kd,fa,fb,sa,sb", CASES)
def test_matches_the_mx_reference(interpret, gen, M, N, Kd, fa, fb, sa, sb):
    K.run(torch, gen, "cpu", M, N, Kd, fa, fb, sa, sb)


@pytest.mark.parametrize("fa,fb", [("e5m2", "e2m1"), ("e4m3", "e5m2"), ("bf16", "e4m3")])
def test_fp8_operands_may_be_typed(interpret, gen, fa, fb):
    """Triton takes e4m3/e5m2 operands as float8e4nv/float8e5 tensors or as their uint8 bytes."""
    K.run(torch, gen, "cpu", 32, 32, 64, fa, fb, True, True, typed_fp8=True)


@pytest.mark.parametrize("elt", ["*fp8e4nv", "*fp8e5"])
def test_typed_fp8_operand_assembles(elt):
    fmt = "e4m3" if elt == "*fp8e4nv" else "e5m2"
    sig = dict(A=elt, A_scale="*u8", B="*u8", B_scale="*u8", Out="*fp32")
    ck = triton.compile(K.dot_scaled_kernel, signature=sig, num_warps=4, target="sm_90a",
                        constexprs=dict(M=64, N=32, K=64, FMT_A=fmt, FMT_B="e2m1", SCALE_A=True, SCALE_B=True))
    assert "0 bytes spill stores" in ptxas.report(ck.asm["ptx"], "sm_90a")


@triton.jit
def _mismatched_fp8_kernel(X):
    a = tl.full((32, 64), 0, tl.float8e5)
    tl.store(X + tl.arange(0, 32), tl.sum(tl.dot_scaled(a, None, "e4m3", a.T, None, "e5m2"), 1))


def test_an_fp8_operand_of_the_other_format_is_refused():
    with pytest.raises(CompilationError, match="lhs of format 'e4m3' must be fp8e4nv or uint8, got fp8e5"):
        triton.compile(_mismatched_fp8_kernel, signature=dict(X="*fp32"), target="sm_90a")


def test_scale_255_is_nan(interpret, gen):
    K.run(torch, gen, "cpu", 32, 32, 64, "e2m1", "e4m3", True, False, nan_scale=True)


def _sig(fa, fb):
    elt = lambda f: "*" + f if f in ("bf16", "fp16") else "*u8"  # noqa: E731
    return dict(A=elt(fa), A_scale="*u8", B=elt(fb), B_scale="*u8", Out="*fp32")


# M = 32 with K = 128 is left out: there the mma.sync dot of an fp8 → bf16 operand spills already
# without dot_scaled (a backend matter of the dot, not of the upcast)
ASSEMBLED = [c for c in CASES if not (c[0] < 64 and c[2] > 64)] + [
    (128, 32, 64, "e2m1", "e4m3", True, False), (64, 64, 128, "e5m2", "bf16", True, False)]


@pytest.mark.parametrize("M,N,Kd,fa,fb,sa,sb", ASSEMBLED)
def test_assembles_without_spills(M, N, Kd, fa, fb, sa, sb):
    ck = triton.compile(K.dot_scaled_kernel, signature=_sig(fa, fb), num_warps=4, target="sm_90a",
                        constexprs=dict(M=M, N=N, K=Kd, FMT_A=fa, FMT_B=fb, SCALE_A=sa, SCALE_B=sb))
    assert "0 bytes spill stores" in ptxas.report(ck.asm["ptx"], "sm_90a")
    if M >= 64:   # the upcast operands feed the tensor cores: wgmma on sm_90a
        assert "wgmma.mma_async" in ck.asm["ptx"]


@triton.jit
def _wrong_scale_kernel():
    a = tl.full((32, 64), 0, tl.uint8)
    b = tl.full((64, 32), 0, tl.uint8)
    lhs_scale_wrong = tl.full((32, 4), 0, tl.uint8)
    rhs_scale = tl.full((32, 2), 0, tl.uint8)
    acc = tl.full((32, 32), 0.0, tl.float32)
    tl.dot_scaled(a, lhs_scale_wrong, "e5m2", b, rhs_scale, "e5m2", acc, False, True, True, tl.float32)


@triton.jit
def _bad_format_kernel(X):
    a = tl.full((32, 64), 0, tl.uint8)
    tl.store(X + tl.arange(0, 32), tl.sum(tl.dot_scaled(a, None, "e3m4", a.T, None, "e4m3"), 1))


def test_refusals():
    with pytest.raises(CompilationError) as e:
        triton.compile(_wrong_scale_kernel, signature={}, target="sm_90a")
    assert str(e.value.__cause__) == "lhs_scale must be a tensor of shape [32, 2]. Got ['32', '4']"
    assert "test_dot_scaled.py:" in str(e.value)
    with pytest.raises(CompilationError, match="lhs_format must be one of"):
        triton.compile(_bad_format_kernel, signature=dict(X="*fp32"), target="sm_90a")
