"""fp32 values an `if` merges, converted to fp16/bf16 after it (tutorial 05 backward's partial sums):
the conversion pairs registers (cvt.rn.{f16,bf16}x2.f32) so LLVM keeps the merge in fp32 instead of
16-bit phis that ptxas holds one per 32-bit register. Same results in interpret mode, on the GPU and
in torch (fp32 add, one rounding)."""
from __future__ import annotations

import re

import pytest
import torch

from tests.compiler.kernels.util import gen, interpret  # noqa: F401
from tests.compiler.test_ptx import ptxas_report

import compiler as triton
import compiler.language as tl

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@triton.jit
def merged_cast_kernel(X, Y, Out, first, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs).to(tl.float32)
    if first == 0:
        v = x
    else:
        v = x + tl.load(Y + offs).to(tl.float32)
    tl.store(Out + offs, v.to(Out.dtype.element_ty))


def _expected(x, y, first):
    return x if first == 0 else (x.float() + y.float()).to(x.dtype)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_merged_values_convert_in_pairs(dtype):
    sig = {"X": f"*{dtype}", "Y": f"*{dtype}", "Out": f"*{dtype}", "first": "i32"}
    ck = triton.compile(merged_cast_kernel, signature=sig, constexprs={"BLOCK": 2048}, num_warps=4,
                        target="sm_90", divisible_by_16=("X", "Y", "Out"))
    ptx = ck.asm["ptx"]
    assert f"cvt.rn.{dtype.replace('fp', 'f')}x2.f32" in ptx
    assert not re.search(r"mov\.b32\s+%r\d+, \{%rs\d+, %rs\d+\}", ptx), "16-bit halves repacked after the merge"
    assert ptxas_report(ptx)["spills"] == 0


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("first", [0, 1])
def test_merged_cast_interpret(interpret, gen, dtype, first):
    x, y = (torch.randn(256, generator=gen).to(DTYPES[dtype]) for _ in range(2))
    out = torch.full_like(x, float("nan"))
    merged_cast_kernel[(1,)](x, y, out, first, BLOCK=256)
    assert torch.equal(out, _expected(x, y, first))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("first", [0, 1])
def test_merged_cast_gpu(gen, dtype, first):
    x, y = (torch.randn(2048, generator=gen).to("cuda", DTYPES[dtype]) for _ in range(2))
    out = torch.full_like(x, float("nan"))
    merged_cast_kernel[(1,)](x, y, out, first, BLOCK=2048)
    assert torch.equal(out, _expected(x, y, first))
