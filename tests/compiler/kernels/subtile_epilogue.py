"""Kernel for test_convert_chunks.py: a K-loop matmul whose epilogue stores the accumulator as two
column halves split off with reshape/permute/split (Triton's test_simple_matmul EPILOGUE_SUBTILE shape)."""
from __future__ import annotations

import compiler as triton
import compiler.language as tl


@triton.jit
def subtile_matmul_kernel(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    """C = A @ B over one [BM, BN] tile a program (M, N, K multiples of the blocks), accumulated in
    C's type; the tile is stored as its left and right halves."""
    pid = tl.program_id(0)
    pid_m = pid % tl.cdiv(M, BM)
    pid_n = pid // tl.cdiv(M, BM)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = B + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=C.dtype.element_ty)
    for _ in tl.range(0, tl.cdiv(K, BK), num_stages=STAGES):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc=acc, out_dtype=C.dtype.element_ty)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
    left, right = tl.split(halves)
    cs = C + rm[:, None] * stride_cm + (pid_n * BN + tl.arange(0, BN // 2))[None, :] * stride_cn
    tl.store(cs, left)
    tl.store(cs + (BN // 2) * stride_cn, right)
