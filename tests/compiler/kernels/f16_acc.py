"""Kernel for the fp16-accumulator tl.dot tests (test_f16_accumulator.py, test_f16_accumulator_gpu.py):
the shape of Triton's test_dot kernel with out_dtype=tl.float16. (Their K loop carrying an fp16 `acc`
is dot_precisions.loop_dot_kernel with fp16 pointers.)"""
from __future__ import annotations

import compiler as triton
import compiler.language as tl


@triton.jit
def f16_dot_kernel(X, stride_xm, stride_xk, Y, stride_yk, stride_yn, W, stride_wn, stride_wl, Z, stride_zm, stride_zn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ADD_MATRIX: tl.constexpr,
                   ADD_ROWS: tl.constexpr, ADD_COLS: tl.constexpr, CHAIN_DOT: tl.constexpr):
    """One tile: Z = X @ Y accumulated in fp16, then the epilogue (+ Z, + its first column or row, or
    @ W, also accumulated in fp16). Z's strides may be transposed (stride_zm 1)."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    x = tl.load(X + rm[:, None] * stride_xm + rk[None, :] * stride_xk)
    y = tl.load(Y + rk[:, None] * stride_yk + rn[None, :] * stride_yn)
    zs = Z + rm[:, None] * stride_zm + rn[None, :] * stride_zn
    z = tl.dot(x, y, out_dtype=tl.float16)
    if ADD_MATRIX:
        z += tl.load(zs)
    if ADD_ROWS:
        z += tl.load(Z + rm * stride_zm)[:, None]
    if ADD_COLS:
        z += tl.load(Z + rn * stride_zn)[None, :]
    if CHAIN_DOT:
        w = tl.load(W + rn[:, None] * stride_wn + rn[None, :] * stride_wl)
        z = tl.dot(z.to(w.dtype), w, out_dtype=tl.float16)
    tl.store(zs, z)
