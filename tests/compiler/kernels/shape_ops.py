"""Kernels for the shape ops, scans, custom reductions, sorts, histograms and gathers
(tests/compiler/test_shape_ops.py runs them in interpret mode and compiles them to PTX;
test_shape_ops_gpu.py runs them on the GPU)."""
from __future__ import annotations

import compiler as triton
import compiler.language as tl


@triton.jit
def join_split_kernel(X, Y, Joined, A, B, Inter, M: tl.constexpr, N: tl.constexpr):
    """x, y: [M, N]. Joined: [M, N, 2]; A, B: split of that join (x and y again, through a
    permute so that the split's operand is not the join's result); Inter: interleave(x, y) [M, 2N]."""
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    x = tl.load(X + rm * N + rn)
    y = tl.load(Y + rm * N + rn)
    j = tl.join(x, y)
    r2 = tl.arange(0, 2)[None, None, :]
    tl.store(Joined + rm[:, :, None] * (2 * N) + rn[:, :, None] * 2 + r2, j)
    t = tl.permute(j, 2, 0, 1)          # [2, M, N]
    a, b = tl.permute(t, (1, 2, 0)).split()
    tl.store(A + rm * N + rn, a)
    tl.store(B + rm * N + rn, b)
    tl.store(Inter + rm * (2 * N) + tl.arange(0, 2 * N)[None, :], tl.interleave(x, y))


@triton.jit
def cat_kernel(X, Y, Z, Total, N: tl.constexpr):
    """Z: tl.cat(x, y) [2N] (any order of the 2N elements); Total: its sum."""
    offs = tl.arange(0, N)
    z = tl.cat(tl.load(X + offs), tl.load(Y + offs), can_reorder=True)
    tl.store(Z + tl.arange(0, 2 * N), z)
    tl.store(Total, tl.sum(z.to(tl.float64), 0))


@triton.jit
def split_loaded_kernel(X, A, B, N: tl.constexpr):
    """X: [N, 2] loaded as one block, split into its columns; also a scalar split of a [2] block."""
    rn = tl.arange(0, N)
    x = tl.load(X + rn[:, None] * 2 + tl.arange(0, 2)[None, :])
    a, b = tl.split(x)
    tl.store(A + rn, a)
    tl.store(B + rn, b)
    s0, s1 = tl.split(tl.load(X + tl.arange(0, 2)))
    tl.store(A + N, s1)
    tl.store(B + N, s0)


# ---- custom reductions and scans ------------------------------------------------------------------

@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _max_pick(a, b):
    return tl.where(a > b, a, b)


@triton.jit
def _argmax_combine(v0, i0, v1, i1):
    """(value, index) pairs: the larger value, the smaller index on ties (Triton's argmax rule)."""
    take1 = (v1 > v0) | ((v1 == v0) & (i1 < i0))
    return tl.where(take1, v1, v0), tl.where(take1, i1, i0)


@triton.jit
def _affine(a0, b0, a1, b1):
    """Composition of x -> a*x + b maps (first the earlier one): the linear recurrence scan."""
    return a1 * a0, a1 * b0 + b1


@triton.jit
def _branchy_max(a, b):
    if a > b:
        return a
    return b


@triton.jit
def reduce_combine_kernel(X, Out, Idx, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, OP: tl.constexpr,
                          KEEP: tl.constexpr):
    """Reduce a [M, N] tile along AXIS with a @jit combine (OP: 0 sum, 1 max, 2 argmax pairs,
    3 max through a runtime if)."""
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    x = tl.load(X + rm * N + rn)
    if AXIS == 0:
        offs = tl.arange(0, N)
    else:
        offs = tl.arange(0, M)
    if OP == 0:
        r = tl.reduce(x, AXIS, _add, keep_dims=KEEP)
    elif OP == 1:
        r = x.reduce(AXIS, _max_pick)
    elif OP == 2:
        idx = tl.broadcast_to(rn if AXIS == 1 else rm, M, N)
        r, i = tl.reduce((x, idx), AXIS, _argmax_combine)
        tl.store(Idx + offs, i)
    else:
        r = tl.reduce(x, AXIS, _branchy_max)
    if KEEP:
        r = tl.reshape(r, offs.shape)
    tl.store(Out + offs, r)


@triton.jit
def reduce_all_kernel(X, Out, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, N)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(Out, tl.reduce(x, None, _add))


@triton.jit
def scan_kernel(X, Y, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, OP: tl.constexpr, REVERSE: tl.constexpr):
    """Inclusive scans of a [M, N] tile (OP: 0 associative_scan add, 1 cumprod, 2 associative_scan
    max, 3 cumsum)."""
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(X + offs)
    if OP == 0:
        y = tl.associative_scan(x, AXIS, _add, reverse=REVERSE)
    elif OP == 1:
        y = tl.cumprod(x, axis=AXIS, reverse=REVERSE)
    elif OP == 2:
        y = x.associative_scan(AXIS, _max_pick, REVERSE)
    else:
        y = tl.cumsum(x, AXIS, REVERSE)
    tl.store(Y + offs, y)


@triton.jit
def linear_recurrence_kernel(A, B, H, N: tl.constexpr, REVERSE: tl.constexpr):
    """h[i] = a[i] * h[i-1] + b[i] (h[-1] = 0) as a two-input associative scan."""
    offs = tl.arange(0, N)
    a = tl.load(A + offs)
    b = tl.load(B + offs)
    _, h = tl.associative_scan((a, b), 0, _affine, reverse=REVERSE)
    tl.store(H + offs, h)


@triton.jit
def linear_recurrence_2d_kernel(A, B, H, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, REVERSE: tl.constexpr):
    """The linear recurrence along AXIS of a [M, N] tile, every row (column) on its own."""
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    a = tl.load(A + offs)
    b = tl.load(B + offs)
    _, h = tl.associative_scan((a, b), AXIS, _affine, reverse=REVERSE)
    tl.store(H + offs, h)


# (shape, axis) of the linear-recurrence cases run on the GPU and replayed on the CTA model: for
# n elements, 1-D and 2-D blocks scanned along a long and a short axis, so that registers, lanes
# and warps along the axis come in every order and count
def recurrence_blocks(n):
    return [((n,), 0), ((n // 16, 16), 0), ((n // 16, 16), 1), ((16, n // 16), 0), ((16, n // 16), 1)]


RECURRENCE_SIZES, RECURRENCE_WARPS = (512, 2048, 4096, 8192), (1, 4, 8)


# ---- gather, flip, sort, histogram ----------------------------------------------------------------

@triton.jit
def gather_kernel(Src, Index, Out, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, AXIS: tl.constexpr):
    """Src [M, N]; Index and Out [K, N] (AXIS 0) or [M, K] (AXIS 1)."""
    src = tl.load(Src + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
    if AXIS == 0:
        offs = tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :]
    else:
        offs = tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :]
    idx = tl.load(Index + offs)
    tl.store(Out + offs, tl.gather(src, idx, AXIS))


@triton.jit
def flip_sort_kernel(X, Flipped, Sorted, M: tl.constexpr, N: tl.constexpr, DIM: tl.constexpr,
                     DESCENDING: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(X + offs)
    tl.store(Flipped + offs, tl.flip(x, DIM))
    tl.store(Sorted + offs, tl.sort(x, dim=DIM, descending=DESCENDING))


@triton.jit
def sort_1d_kernel(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, tl.load(X + offs).sort())


@triton.jit
def histogram_kernel(X, Out, n, N: tl.constexpr, BINS: tl.constexpr):
    """Per program: the histogram of its N elements (masked below n) added to Out."""
    offs = tl.program_id(0) * N + tl.arange(0, N)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0)
    h = tl.histogram(x, BINS, mask=mask)
    tl.atomic_add(Out + tl.arange(0, BINS), h)


@triton.jit
def cumsum_dtype_kernel(X, Y, Y64, N: tl.constexpr):
    """bf16 input: tl.cumsum accumulates and returns fp32 (as Triton); dtype= casts first."""
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    y = tl.cumsum(x, 0)
    tl.static_assert(y.dtype == tl.float32)
    tl.store(Y + offs, y)
    tl.store(Y64 + offs, tl.cumsum(x.to(tl.int32), 0, dtype=tl.int64) * 4294967296)
