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
