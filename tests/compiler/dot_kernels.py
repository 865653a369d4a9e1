"""Kernels for the tl.dot tests (test_dot_mma.py, test_matmul_gpu.py): one file, imported by both."""
from __future__ import annotations

import compiler as triton
import compiler.language as tl


@triton.jit
def dot_kernel(A, B, C, D, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_dm, stride_dn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, TRANS_A: tl.constexpr, TRANS_B: tl.constexpr,
               PREC: tl.constexpr, HAS_C: tl.constexpr):
    """D = A @ B (+ C). TRANS_A: A's tile is loaded as [BK, BM] (from the same strides) and
    transposed with tl.trans; TRANS_B likewise for B ([BN, BK] → [BK, BN])."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        if TRANS_A:
            at = tl.load(A + kk[:, None] * stride_ak + rm[None, :] * stride_am, mask=(kk[:, None] < K) & (rm[None, :] < M), other=0.0)
            a = tl.trans(at)
        else:
            a = tl.load(A + rm[:, None] * stride_am + kk[None, :] * stride_ak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        if TRANS_B:
            bt = tl.load(B + rn[:, None] * stride_bn + kk[None, :] * stride_bk, mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
            b = tl.trans(bt)
        else:
            b = tl.load(B + kk[:, None] * stride_bk + rn[None, :] * stride_bn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if PREC == "tf32":
            acc = tl.dot(a, b, acc, input_precision="tf32")
        elif PREC == "ieee":
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_C:
        acc += tl.load(C + rm[:, None] * stride_cm + rn[None, :] * stride_cn, mask=cmask, other=0.0).to(tl.float32)
    tl.store(D + rm[:, None] * stride_dm + rn[None, :] * stride_dn, acc.to(D.dtype.element_ty), mask=cmask)


@triton.jit
def dot_out_dtype_kernel(A, B, D, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ALLOW_TF32: tl.constexpr):
    """One tile, no loop: fp16 accumulation through out_dtype (fp16 inputs) or allow_tf32 (fp32)."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(A + rm[:, None] * BK + rk[None, :])
    b = tl.load(B + rk[:, None] * BN + rn[None, :])
    if A.dtype.element_ty == tl.float16:
        d = tl.dot(a, b, out_dtype=tl.float16)
    else:
        d = tl.dot(a, b, allow_tf32=ALLOW_TF32)
    tl.store(D + rm[:, None] * BN + rn[None, :], d.to(D.dtype.element_ty))
