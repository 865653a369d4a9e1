"""Kernels for the int8 and split-precision (tf32x3) tl.dot tests: test_dot_precisions.py (PTX,
interpret mode) and test_dot_precisions_gpu.py."""
from __future__ import annotations

import compiler as triton
import compiler.language as tl


@triton.jit
def tile_dot_kernel(A, stride_am, stride_ak, B, stride_bk, stride_bn, C, stride_cm, stride_cn,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, ADD_C: tl.constexpr):
    """One [BM, BN] tile: C = A @ B (+ C), A and B in any strides (col-major ones from stride 1)."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(A + rm[:, None] * stride_am + rk[None, :] * stride_ak)
    b = tl.load(B + rk[:, None] * stride_bk + rn[None, :] * stride_bn)
    cs = C + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    if ADD_C:
        d = tl.dot(a, b, tl.load(cs), input_precision=PREC)
    else:
        d = tl.dot(a, b, input_precision=PREC)
    tl.store(cs, d)


@triton.jit
def loop_dot_kernel(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
    """A tiled matmul over K (masked edges) accumulating in the dot's own accumulator type."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=C.dtype.element_ty)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(A + rm[:, None] * stride_am + kk[None, :] * stride_ak, mask=(rm[:, None] < M) & (kk[None, :] < K),
                    other=0)
        b = tl.load(B + kk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=(kk[:, None] < K) & (rn[None, :] < N),
                    other=0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
    tl.store(C + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def range_stages_matmul_kernel(A, B, C, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr,
                               BK: tl.constexpr, STAGES: tl.constexpr):
    """One [BM, BN] tile over K, the loop's pipeline depth from tl.range (not the launch's num_stages)."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = B + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in tl.range(0, tl.cdiv(K, BK), num_stages=STAGES):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    tl.store(C + rm[:, None] * stride_cm + rn[None, :], acc)


@triton.jit
def int8_accumulate_kernel(A, B, C, K, stride_am, stride_bn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """`acc += tl.dot(a, b)` over K on int8 tiles (A row-major, B K-major), int32 C [BM, BN] row-major."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for k0 in range(0, K, BK):
        a = tl.load(A + rm[:, None] * stride_am + (k0 + rk)[None, :])
        b = tl.load(B + (k0 + rk)[:, None] + rn[None, :] * stride_bn)
        acc += tl.dot(a, b)
    tl.store(C + rm[:, None] * BN + rn[None, :], acc)
