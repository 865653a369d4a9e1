"""Kernels for the fp16-accumulator tl.dot tests (test_f16_accumulator.py, test_f16_accumulator_gpu.py):
the shape of Triton's test_dot kernel with out_dtype=tl.float16, and a K loop carrying an fp16 `acc`."""
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


@triton.jit
def f16_loop_kernel(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """A tiled matmul over K (masked edges) whose accumulator is fp16 (`acc=` of fp16 type)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float16)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(A + rm[:, None] * stride_am + kk[None, :] * stride_ak, mask=(rm[:, None] < M) & (kk[None, :] < K),
                    other=0.0)
        b = tl.load(B + kk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=(kk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc, out_dtype=tl.float16)
    tl.store(C + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
