"""tl.map_elementwise: interpret mode against torch, and the kernels through the NVPTX backend and
ptxas (GPU runs: test_map_elementwise_gpu.py)."""
from __future__ import annotations

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler import ptxas
from compiler.errors import CompilationError
from tests.compiler.kernels import map_elementwise as K
from tests.compiler.kernels.util import gen, interpret, poisoned, rand  # noqa: F401


@pytest.mark.parametrize("BLOCK", [1, 128])
def test_branching_scalar_function(interpret, gen, BLOCK):
    K.run_compare(torch, rand, poisoned, gen, "cpu", BLOCK)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_broadcast_arguments_and_scalar(interpret, gen, dtype):
    K.run_selu_2d(torch, rand, poisoned, gen, "cpu", 16, 32, dtype)


@pytest.mark.parametrize("BLOCK,pack", [(512, 1), (512, 2), (8, 4), (2, 4)])
def test_multiple_results_and_pack(interpret, gen, BLOCK, pack):
    K.run_divmod(torch, rand, poisoned, gen, "cpu", BLOCK, pack)


@pytest.mark.parametrize("kernel,sig,cx", [
    (K.compare_kernel, dict(X="*i32", Y="*i32", Z="*i32"), dict(BLOCK=128)),
    (K.selu_2d_kernel, dict(X="*fp16", B="*fp16", Out="*fp16", alpha="fp32"), dict(M=16, N=32)),
    (K.divmod_kernel, dict(A="*i32", B="*i32", Q="*i32", R="*i32"), dict(BLOCK=512, PACK=2)),
    (K.divmod_kernel, dict(A="*i32", B="*i32", Q="*i32", R="*i32"), dict(BLOCK=32, PACK=4)),
])
@pytest.mark.parametrize("nw", [1, 4])
def test_assembles(kernel, sig, cx, nw):
    ck = triton.compile(kernel, signature=sig, constexprs=cx, num_warps=nw, target="sm_90")
    report = ptxas.report(ck.asm["ptx"])
    assert "0 bytes spill stores" in report


def test_refusals_point_at_the_call():
    @triton.jit
    def returns_block(x):
        return tl.zeros((4,), tl.float32) + x

    @triton.jit
    def k(X, BLOCK: tl.constexpr):
        x = tl.load(X + tl.arange(0, BLOCK))
        tl.store(X + tl.arange(0, BLOCK), tl.map_elementwise(returns_block, x))

    with pytest.raises(CompilationError, match="map_elementwise") as e:
        triton.compile(k, signature=dict(X="*fp32"), constexprs=dict(BLOCK=4), target="sm_90")
    assert "tl.map_elementwise(returns_block, x)" in str(e.value)
