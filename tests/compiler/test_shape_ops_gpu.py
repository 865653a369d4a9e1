"""GPU runs of the shape ops, scans, custom reductions, sorts, histograms and gathers against torch
(run by the lead on an H100: `pytest -m gpu tests/compiler/test_shape_ops_gpu.py`).

Fresh random inputs every run (the seed is printed), outputs poisoned with NaN or a sentinel before
the launch, references in float64 where rounding matters.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.compiler.kernels import shape_ops as SK  # noqa: E402
from tests.compiler.kernels import shape_refs as R  # noqa: E402
from tests.compiler.kernels.gpu_util import DEV, gen, poisoned, rand  # noqa: E402,F401

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("M,N,nw", [(1, 4, 1), (4, 8, 1), (16, 32, 4), (64, 64, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8])
def test_join_split_interleave(gen, M, N, nw, dtype):
    x, y = rand(gen, (M, N), dtype, -100, 100), rand(gen, (M, N), dtype, -100, 100)
    joined, a, b = poisoned((M, N, 2), dtype), poisoned((M, N), dtype), poisoned((M, N), dtype)
    inter = poisoned((M, 2 * N), dtype)
    SK.join_split_kernel[(1,)](x, y, joined, a, b, inter, M=M, N=N, num_warps=nw)
    R.check_join_split_interleave(x, y, joined, a, b, inter)


@pytest.mark.parametrize("N,nw", [(1, 1), (32, 1), (128, 4), (1024, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.int64])
def test_cat_holds_both_blocks(gen, N, nw, dtype):
    x, y = rand(gen, (N,), dtype, -100, 100), rand(gen, (N,), dtype, -100, 100)
    z, total = poisoned((2 * N,), dtype), poisoned((1,), torch.float64)
    SK.cat_kernel[(1,)](x, y, z, total, N=N, num_warps=nw)
    R.check_cat(x, y, z, total)


@pytest.mark.parametrize("N,nw", [(2, 1), (64, 4), (1024, 8)])
def test_split_of_loaded_pairs(gen, N, nw):
    x = rand(gen, (N, 2), torch.float32)
    a, b = poisoned((N + 1,), torch.float32), poisoned((N + 1,), torch.float32)
    SK.split_loaded_kernel[(1,)](x, a, b, N=N, num_warps=nw)
    assert torch.equal(a[:N], x[:, 0]) and torch.equal(b[:N], x[:, 1])
    assert a[N] == x[0, 1] and b[N] == x[0, 0]


@pytest.mark.parametrize("M,N,nw", [(1, 32, 1), (8, 16, 4), (32, 64, 4), (4, 256, 8), (128, 8, 8)])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", [0, 1, 2, 3])
def test_reduce_custom_combine(gen, M, N, nw, axis, op):
    dtype = torch.int32 if op == 2 else torch.float32
    x = rand(gen, (M, N), dtype, -8, 8) if op == 2 else rand(gen, (M, N), dtype)
    n_out = N if axis == 0 else M
    out, idx = poisoned((n_out,), dtype), poisoned((n_out,), torch.int32)
    SK.reduce_combine_kernel[(1,)](x, out, idx, M=M, N=N, AXIS=axis, OP=op, KEEP=False, num_warps=nw)
    if op == 0:
        torch.testing.assert_close(out.double(), x.double().sum(axis), rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(out, x.max(axis).values)
    if op == 2:
        first = (x == x.max(axis, keepdim=True).values).int().argmax(axis)
        assert torch.equal(idx.long(), first.long())




@pytest.mark.parametrize("M,N,nw", [(1, 64, 1), (4, 32, 4), (16, 128, 4), (2, 1024, 8), (256, 4, 4)])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", [0, 1, 2])
@pytest.mark.parametrize("reverse", [False, True])
def test_scans(gen, M, N, nw, axis, op, reverse):
    x = rand(gen, (M, N), torch.float32, 0.99, 1.01) if op == 1 else rand(gen, (M, N), torch.float32)
    y = poisoned((M, N), torch.float32)
    SK.scan_kernel[(1,)](x, y, M=M, N=N, AXIS=axis, OP=op, REVERSE=reverse, num_warps=nw)
    torch.testing.assert_close(y.double(), R.scan_ref(x, axis, op, reverse), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("N,nw", [(16, 1), (256, 4), (1024, 8), (4096, 4)])
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence_tuple_scan(gen, N, nw, reverse):
    a, b = rand(gen, (N,), torch.float32, 0.5, 1.0), rand(gen, (N,), torch.float32)
    h = poisoned((N,), torch.float32)
    SK.linear_recurrence_kernel[(1,)](a, b, h, N=N, REVERSE=reverse, num_warps=nw)
    torch.testing.assert_close(h.double().cpu(), R.linear_recurrence_ref(a, b, reverse), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("block", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("nw", SK.RECURRENCE_WARPS)
@pytest.mark.parametrize("n", SK.RECURRENCE_SIZES)
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence_order(gen, n, nw, block, reverse):
    """A non-commutative combine over many elements per thread, warps along the axis and 2-D
    blocks: a combine that sees its operands out of order shows (a reversed cumsum would not)."""
    shape, axis = SK.recurrence_blocks(n)[block]
    a, b = rand(gen, shape, torch.float32, 0.5, 1.0), rand(gen, shape, torch.float32)
    h = poisoned(shape, torch.float32)
    if len(shape) == 1:
        SK.linear_recurrence_kernel[(1,)](a, b, h, N=n, REVERSE=reverse, num_warps=nw)
    else:
        SK.linear_recurrence_2d_kernel[(1,)](a, b, h, M=shape[0], N=shape[1], AXIS=axis, REVERSE=reverse, num_warps=nw)
    torch.testing.assert_close(h.double().cpu(), R.linear_recurrence_ref(a, b, reverse, axis), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("M,N,K,axis,nw", [(8, 16, 8, 0, 1), (8, 16, 32, 0, 4), (16, 32, 64, 1, 4), (32, 4, 2, 1, 1),
                                           (64, 64, 64, 0, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_gather(gen, M, N, K, axis, nw, dtype):
    src = rand(gen, (M, N), dtype, -100, 100)
    idx_shape = (K, N) if axis == 0 else (M, K)
    idx = rand(gen, idx_shape, torch.int32, 0, (M, N)[axis] - 1)
    out = poisoned(idx_shape, dtype)
    SK.gather_kernel[(1,)](src, idx, out, M=M, N=N, K=K, AXIS=axis, num_warps=nw)
    assert torch.equal(out, torch.gather(src, axis, idx.long()))


@pytest.mark.parametrize("M,N,nw", [(1, 2, 1), (4, 32, 4), (8, 128, 4), (2, 1024, 8), (4, 4096, 4)])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16, torch.uint8])
def test_flip_sort(gen, M, N, nw, dim, descending, dtype):
    x = rand(gen, (M, N), dtype, 0, 255) if dtype == torch.uint8 else rand(gen, (M, N), dtype, -1000, 1000)
    flipped, srt = poisoned((M, N), dtype), poisoned((M, N), dtype)
    SK.flip_sort_kernel[(1,)](x, flipped, srt, M=M, N=N, DIM=dim, DESCENDING=descending, num_warps=nw)
    R.check_flip_sort(x, flipped, srt, dim, descending)


def test_sort_nan_last(gen):
    x = rand(gen, (512,), torch.float32)
    x[[3, 17, 400]] = float("nan")
    y = poisoned((512,), torch.float32)
    SK.sort_1d_kernel[(1,)](x, y, N=512, num_warps=4)
    assert torch.isnan(y[-3:]).all()
    assert torch.equal(y[:-3], torch.sort(x).values[:-3])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.int64])
@pytest.mark.parametrize("n,N,bins,nw", [(1000, 256, 64, 4), (77, 128, 512, 4), (1 << 20, 1024, 16, 8), (5000, 2048, 1024, 8)])
def test_histogram(gen, dtype, n, N, bins, nw):
    x = rand(gen, (n,), dtype, -5, min(bins + 5, 127) if dtype == torch.int8 else bins + 5)
    out = torch.zeros((bins,), dtype=torch.int32, device=DEV)
    SK.histogram_kernel[((n + N - 1) // N,)](x, out, n, N=N, BINS=bins, num_warps=nw)
    xs = x.long()
    assert torch.equal(out.long(), torch.bincount(xs[(xs >= 0) & (xs < bins)], minlength=bins))


def test_cumsum_promotes_bf16_and_takes_dtype(gen):
    x = rand(gen, (512,), torch.bfloat16, -50, 50)
    y, y64 = poisoned((512,), torch.float32), poisoned((512,), torch.int64)
    SK.cumsum_dtype_kernel[(1,)](x, y, y64, N=512, num_warps=4)
    torch.testing.assert_close(y.double(), x.double().cumsum(0), rtol=1e-6, atol=1e-3)
    assert torch.equal(y64, x.to(torch.int32).long().cumsum(0) * 4294967296)
