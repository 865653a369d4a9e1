"""The matmul epilogue (backend/fragment_convert.py: stmatrix into a swizzled tile, 16-byte reads,
coalesced stores) on the GPU against torch in float64 (`pytest -m gpu`).

Fresh random inputs each run (seed printed), outputs poisoned with NaN, fp16/bf16/fp32 results, the
tile shapes and warp counts of the matmul configs (wgmma: 1 and 2 warpgroups along M or N), and odd
sizes whose masked edge tiles must leave the poison outside the matrix untouched.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import dot_kernels as DK  # noqa: E402
from test_dot_mma import RTOL, load_tutorial, rel_err  # noqa: E402
from test_matmul_gpu import g  # noqa: E402,F401 - the seeded CUDA generator fixture

pytestmark = pytest.mark.gpu
DEV = "cuda"
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# the output's own rounding on top of the inputs' (relative norm, inputs ~N(0,1))
OUT_RTOL = {"fp16": 2e-3, "bf16": 1.2e-2, "fp32": 1e-3}


TILES = [  # bm, bn, bk, num_warps, num_stages
    (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 2, 5), (32, 64, 32, 2, 5), (64, 64, 64, 8, 3),
]


@pytest.mark.parametrize("bm,bn,bk,nw,ns", TILES)
@pytest.mark.parametrize("out", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("M,N,K", [(333, 517, 200)])
def test_dot_epilogue_gpu(g, bm, bn, bk, nw, ns, out, M, N, K):
    """D = A @ B + C stored as `out`; D is one element wider than the matrix on each side (its
    stride the padded width) so that a store outside the mask shows as a non-NaN border."""
    a = torch.randn(M, K, generator=g, device=DEV).half()
    b = torch.randn(K, N, generator=g, device=DEV).half()
    c = torch.randn(M, N, generator=g, device=DEV).half()
    pad = torch.full((M + 1, N + 1), float("nan"), device=DEV, dtype=TORCH[out])
    d = pad[:M, :N]
    grid = (math.ceil(M / bm), math.ceil(N / bn))
    DK.dot_kernel[grid](a, b, c, d, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        d.stride(0), d.stride(1), BM=bm, BN=bn, BK=bk, TRANS_A=0, TRANS_B=0, PREC="tf32", HAS_C=True,
                        num_warps=nw, num_stages=ns)
    ref = a.double() @ b.double() + c.double()
    assert rel_err(d, ref) < RTOL["fp16"] + OUT_RTOL[out]
    assert torch.isnan(pad[M, :]).all() and torch.isnan(pad[:, N]).all(), "a store outside the mask"


@pytest.mark.parametrize("bm,bn,bk,nw,ns", TILES)
@pytest.mark.parametrize("M,N,K", [(1024, 1024, 512), (1000, 600, 328), (16, 4096, 512)])
def test_tutorial_epilogue_gpu(g, bm, bn, bk, nw, ns, M, N, K):
    """Tutorial 03's kernel (fp16 result through `accumulator.to(tl.float16)`) at each tile."""
    kern = load_tutorial().matmul_kernel
    a = torch.randn(M, K, generator=g, device=DEV).half()
    b = torch.randn(K, N, generator=g, device=DEV).half()
    c = torch.full((M, N), float("nan"), device=DEV, dtype=torch.float16)
    grid = (math.ceil(M / bm) * math.ceil(N / bn),)
    kern.fn[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                  BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION="",
                  num_warps=nw, num_stages=ns)
    assert rel_err(c, a.double() @ b.double()) < RTOL["fp16"] + OUT_RTOL["fp16"]
