"""Tutorial 03 as a persistent kernel (bench/matmul_persistent_kernels.py: #SMs programs, a tile
loop around the tutorial's K loop and epilogue): interpret mode and the GPU against torch in
float64 with NaN-poisoned outputs and odd sizes (edge tiles masked, fewer tiles than programs,
programs with an uneven share of tiles), and its PTX: the pipelined wgmma K loop and the stmatrix
epilogue inside the tile loop, no spills."""
from __future__ import annotations

import math

import pytest
import torch

from tests.compiler.kernels.tutorials_more import matmul_persistent as P
from tests.compiler.kernels.util import gen, interpret  # noqa: F401
from tests.compiler.test_tutorials_more import cuda_gen  # noqa: F401 - the seeded generator fixture

import compiler as triton


def _configs(*tiles):
    return [triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": g},
                          num_warps=w, num_stages=s) for m, n, k, g, w, s in tiles]


def _check(c, a, b):
    assert not torch.isnan(c).any(), "an output tile was never written"
    ref = a.double() @ b.double()
    rel = ((c.double() - ref).norm() / ref.norm()).item()
    assert rel < 3e-3, rel


@pytest.mark.parametrize("M,N,K,num_sms", [(100, 90, 72, 3), (64, 64, 64, 16), (33, 130, 40, 5)])
def test_persistent_interpret(interpret, gen, M, N, K, num_sms):
    a = torch.randn(M, K, generator=gen).half()
    b = torch.randn(K, N, generator=gen).half()
    kern = P.autotuned(_configs((32, 32, 16, 2, 4, 2)))
    _check(P.matmul_persistent(kern, a, b, num_sms), a, b)


@pytest.mark.parametrize("pointer_tma", ["1", "0"])
def test_persistent_ptx(pointer_tma, monkeypatch):
    """The tiles through TMA (the default) or the cp.async pipeline (BLOCKTUNE_POINTER_TMA=0)."""
    from tests.compiler.test_ptx import ptxas_report
    monkeypatch.setenv("BLOCKTUNE_POINTER_TMA", pointer_tma)
    sig = dict(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", M="i32", N="i32", K="i32", stride_am="i32",
               stride_ak="i32", stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32")
    ones = ("stride_ak", "stride_bn", "stride_cn")
    div = tuple(n for n in sig if n not in ones)
    for (bm, bn, bk, nw, ns) in ((128, 256, 64, 8, 3), (128, 128, 32, 4, 4)):
        ck = triton.compile(P.matmul_kernel_persistent, signature=sig,
                            constexprs=dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, NUM_SMS=132),
                            num_warps=nw, num_stages=ns, target="sm_90", divisible_by_16=div, equal_to_1=ones)
        ptx = ck.asm["ptx"]
        copy = "cp.async.bulk.tensor" if pointer_tma == "1" else "cp.async.cg.shared.global"
        assert "wgmma.mma_async" in ptx and copy in ptx and "stmatrix" in ptx
        rep = ptxas_report(ptx)
        assert rep["spills"] == 0 and rep["stack"] == 0, rep["text"]


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(4096, 4096, 512), (1000, 700, 300), (16, 4096, 1024), (129, 257, 64)])
@pytest.mark.parametrize("tile", [(128, 256, 64, 8, 8, 3), (128, 128, 32, 8, 4, 4), (64, 256, 32, 16, 4, 4),
                                  (256, 128, 64, 8, 8, 3)])
def test_persistent_gpu(cuda_gen, M, N, K, tile):
    a = torch.randn(M, K, generator=cuda_gen).to("cuda", torch.float16)
    b = torch.randn(K, N, generator=cuda_gen).to("cuda", torch.float16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kern = P.autotuned(_configs(tile))
    for num_sms in (sms, 7):   # one wave, and several tiles per program
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        bm, bn = tile[0], tile[1]
        grid = (min(num_sms, math.ceil(M / bm) * math.ceil(N / bn)),)
        kern.fn[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                      BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=tile[2], GROUP_SIZE_M=tile[3], NUM_SMS=num_sms,
                      num_warps=tile[4], num_stages=tile[5])
        _check(c, a, b)
    _check(P.matmul_persistent(kern, a, b, sms), a, b)   # through the autotuner
