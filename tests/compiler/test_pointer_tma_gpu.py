"""Pointer tiles through TMA (backend/pointer_tma.py, on by default; set here as well) on the GPU against
torch in float64 (`pytest -m gpu`).

Fresh random inputs each run (seed printed), outputs poisoned with NaN inside a wider buffer (a
store outside the mask shows as a non-NaN border), odd sizes (M, N not multiples of the tile: the
tutorial's `% M` rows that TMA zero-fills instead of wrapping; K not a multiple of BLOCK_K: the
mask the map's bound replaces), padded row strides (the map's stride), and the same shapes again
with new tensors (the map cache is keyed by address).
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from test_dot_mma import RTOL, load_tutorial, rel_err  # noqa: E402
from test_matmul_gpu import g  # noqa: E402,F401 - the seeded CUDA generator fixture
from tests.compiler.kernels import pointer_tma as PK  # noqa: E402

pytestmark = pytest.mark.gpu
DEV = "cuda"
OUT_RTOL = 2e-3

TILES = [(128, 256, 64, 8, 3), (64, 128, 32, 4, 4), (128, 128, 64, 4, 4), (64, 256, 32, 4, 4), (64, 64, 64, 4, 4),
         (32, 64, 32, 2, 5)]   # the last on mma.sync: the rule does not apply, the answer must not change
# M odd or not a multiple of BLOCK_M, N and K multiples of 16 (the row strides the specialization
# must know are 16-byte multiples for a map) but not of the tiles; 1000³ and M = 1 as bench shapes
SHAPES = [(1000, 1008, 1008), (333, 528, 208), (16, 4096, 512), (129, 272, 80), (1, 1024, 1024), (1000, 1000, 1000)]


@pytest.fixture(autouse=True)
def pointer_tma(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_POINTER_TMA", "1")


def _operands(g, M, N, K):
    return (torch.randn(M, K, generator=g, device=DEV).half(), torch.randn(K, N, generator=g, device=DEV).half())


def _poisoned(M, N):
    """C as a [M, N] view of a NaN buffer one row and column wider (a store outside the mask shows)."""
    pad = torch.full((M + 1, N + 1), float("nan"), device=DEV, dtype=torch.float16)
    return pad, pad[:M, :N]


def _border_untouched(pad, M, N) -> bool:
    return bool(torch.isnan(pad[M, :]).all() and torch.isnan(pad[:, N]).all())


def _padded(rows, cols, pad, g, dtype):
    """A [rows, cols] random view of a [rows, cols + pad] buffer (row stride cols + pad)."""
    buf = torch.randn(rows, cols + pad, generator=g, device=DEV).to(dtype)
    return buf[:, :cols]


def _tutorial(a, b, bm, bn, bk, nw, ns, activation=""):
    """C = A @ B by tutorial 03's kernel into a NaN-poisoned buffer one row and column wider than C;
    also returns the names of the tensor maps the launched kernel took."""
    M, K = a.shape
    N = b.shape[1]
    pad, c = _poisoned(M, N)
    grid = (math.ceil(M / bm) * math.ceil(N / bn),)
    kern = load_tutorial().matmul_kernel.fn
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    meta = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION=activation,
                num_warps=nw, num_stages=ns)
    kern[grid](*args, **meta)
    ck = kern.warmup(*args, grid=grid, **meta)
    return pad, c, [s["name"] for s in ck.metadata.get("pointer_maps") or ()]


def _expected_maps(a, b, nw) -> list:
    """The maps the rule must take: wgmma (4 warps or more), 16-byte row strides (the inner 1). M == 1
    is specialized to the constant 1, so A's `% M` row wrap folds to row 0 for every row: not a box,
    A stays on cp.async."""
    if nw < 4:
        return []
    boxes = [("b_ptr.tmap", b)] + ([("a_ptr.tmap", a)] if a.shape[0] != 1 else [])
    return [n for n, t in boxes if t.stride(1) == 1 and t.stride(0) % 16 == 0]


@pytest.mark.parametrize("bm,bn,bk,nw,ns", TILES)
@pytest.mark.parametrize("M,N,K", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tutorial_pointer_tma_gpu(g, bm, bn, bk, nw, ns, M, N, K, dtype):
    for pad_cols in (0, 16):   # contiguous, then row strides padded by 32 bytes (new addresses too)
        a = _padded(M, K, pad_cols, g, dtype)
        b = _padded(K, N, pad_cols, g, dtype)
        pad, c, maps = _tutorial(a, b, bm, bn, bk, nw, ns)
        assert maps == _expected_maps(a, b, nw)
        rtol = RTOL["fp16" if dtype == torch.float16 else "bf16"] + OUT_RTOL
        assert rel_err(c, a.double() @ b.double()) < rtol
        assert _border_untouched(pad, M, N), "a store outside the mask"


@pytest.mark.parametrize("M,N,K", [(77, 304, 1001), (256, 256, 0)])
def test_tutorial_pointer_tma_unaligned_gpu(g, M, N, K):
    """K odd: A's row stride is not a multiple of 16 bytes (no map for A: cp.async beside B's
    copies); K = 0: the loop never runs (the maps over the zero buffer), C is zeros."""
    a, b = _operands(g, M, N, K)
    pad, c, maps = _tutorial(a, b, 128, 128, 64, 4, 4)
    assert maps == _expected_maps(a, b, 4)
    if K == 0:
        assert (c == 0).all()
    else:
        assert rel_err(c, a.double() @ b.double()) < RTOL["fp16"] + OUT_RTOL
    assert _border_untouched(pad, M, N)


def test_tutorial_leaky_relu_gpu(g):
    """The tutorial's fused activation: an elementwise epilogue between the loop and the store."""
    M, N, K = 1000, 1008, 1008
    a, b = _operands(g, M, N, K)
    pad, c, maps = _tutorial(a, b, 128, 256, 64, 8, 3, activation="leaky_relu")
    assert maps == ["b_ptr.tmap", "a_ptr.tmap"]
    ref = a.double() @ b.double()
    assert rel_err(c, torch.where(ref >= 0, ref, 0.01 * ref)) < RTOL["fp16"] + OUT_RTOL
    assert _border_untouched(pad, M, N)


def test_tutorial_transposed_b_gpu(g):
    """B given as a transposed view (unit stride along K): not a row-major box, B stays on cp.async."""
    M, N, K = 500, 300, 256
    a = torch.randn(M, K, generator=g, device=DEV).half()
    b = torch.randn(N, K, generator=g, device=DEV).half().t()
    pad, c, maps = _tutorial(a, b, 128, 128, 64, 4, 4)
    assert maps == ["a_ptr.tmap"]
    assert rel_err(c, a.double() @ b.double()) < RTOL["fp16"] + OUT_RTOL


@pytest.mark.parametrize("M,N,K", [(1000, 1008, 1008), (333, 528, 208)])
def test_masked_rows_pointer_tma_gpu(g, M, N, K):
    a, b = _operands(g, M, N, K)
    pad, c = _poisoned(M, N)
    grid = (math.ceil(M / 128), math.ceil(N / 128))
    PK.matmul_masked_rows_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                       c.stride(0), c.stride(1), BM=128, BN=128, BK=64, num_warps=4, num_stages=4)
    assert rel_err(c, a.double() @ b.double()) < RTOL["fp16"] + OUT_RTOL
    assert _border_untouched(pad, M, N)


def test_colsum_sees_wrapped_rows_gpu(g):
    """M < BM: the tile's rows wrap over A's M rows and the column sums see every one of them."""
    M, N, K = 48, 300, 200
    a, b = _operands(g, M, N, K)
    c = torch.full((N,), float("nan"), device=DEV, dtype=torch.float32)
    BM = 64
    PK.matmul_colsum_kernel[(math.ceil(N / 128),)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                   b.stride(1), BM=BM, BN=128, BK=64, num_warps=4, num_stages=3)
    rows = torch.arange(BM, device=DEV) % M
    ref = (a.double()[rows] @ b.double()).sum(0)
    assert rel_err(c, ref) < RTOL["fp16"] + OUT_RTOL


def test_compiled_kernel_launch_gpu(g):
    """compiler.compile(...)[grid](...): the CompiledKernel's own launch builds the maps too."""
    import compiler as triton
    from test_dot_mma import TUT_SIG
    M, N, K = 1000, 1008, 1008
    a, b = _operands(g, M, N, K)
    c = torch.full((M, N), float("nan"), device=DEV, dtype=torch.float16)
    ck = triton.compile(load_tutorial().matmul_kernel.fn, signature=TUT_SIG,
                        constexprs=dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8,
                                        ACTIVATION=""),
                        num_warps=8, num_stages=3, target="sm_90",
                        divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "N", "K", "stride_am", "stride_bk", "stride_cm"),
                        equal_to_1=("stride_ak", "stride_bn", "stride_cn"))
    assert [s["name"] for s in ck.metadata["pointer_maps"]] == ["b_ptr.tmap", "a_ptr.tmap"]
    ck[(math.ceil(M / 128) * math.ceil(N / 256),)](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))
    assert rel_err(c, a.double() @ b.double()) < RTOL["fp16"] + OUT_RTOL


@pytest.mark.parametrize("bm,bn,bk,nw,ns", [(128, 256, 64, 8, 3), (128, 128, 64, 4, 4)])
@pytest.mark.parametrize("M,N,K", [(1000, 1008, 1008), (333, 528, 208)])
def test_persistent_pointer_tma_gpu(g, bm, bn, bk, nw, ns, M, N, K):
    """bench/matmul_persistent_kernels.py (a tile loop around the K loop), fewer programs than tiles."""
    from tests.compiler.kernels import bench_kernels
    kern = bench_kernels("matmul_persistent_kernels.py").matmul_kernel_persistent
    a, b = _operands(g, M, N, K)
    pad, c = _poisoned(M, N)
    programs = 7
    kern[(programs,)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                      BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, NUM_SMS=programs,
                      num_warps=nw, num_stages=ns)
    assert rel_err(c, a.double() @ b.double()) < RTOL["fp16"] + OUT_RTOL
    assert _border_untouched(pad, M, N)
