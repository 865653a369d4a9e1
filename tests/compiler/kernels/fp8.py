"""fp8 kernels shared by tests/compiler/test_fp8.py (interpret mode, PTX) and test_fp8_gpu.py."""
from __future__ import annotations

import compiler as triton
import compiler.language as tl


@triton.jit
def convert_kernel(X, Y, N, ROUNDING: tl.constexpr, BLOCK: tl.constexpr):
    """Y = X converted to Y's element type (fp_downcast_rounding=ROUNDING when not None)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + offs, mask=mask)
    tl.store(Y + offs, x.to(Y.dtype.element_ty, fp_downcast_rounding=ROUNDING), mask=mask)


@triton.jit
def sign_ops_kernel(X, Abs, Neg, Sel, N, BLOCK: tl.constexpr):
    """|x|, -x and a select between x and -x, all on fp8 values."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + offs, mask=mask)
    tl.store(Abs + offs, tl.abs(x), mask=mask)
    tl.store(Neg + offs, -x, mask=mask)
    tl.store(Sel + offs, tl.where(offs % 2 == 0, x, -x), mask=mask)


@triton.jit
def fp8_matmul_kernel(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IMPRECISE: tl.constexpr):
    """C (fp32) = A @ B over a K loop, masked edges; A and B of any fp8 kinds."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(A + rm[:, None] * stride_am + (k0 + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(B + (k0 + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE)
    tl.store(C + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run_matmul(a, b, bm, bn, bk, num_warps, imprecise=None, num_stages=3):
    """fp8_matmul_kernel on torch tensors a [M, K], b [K, N] (any strides); returns C (fp32)."""
    import torch  # noqa: PLC0415 - the kernels import without torch
    m, k = a.shape
    n = b.shape[1]
    c = torch.full((m, n), float("nan"), device=a.device)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    fp8_matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                            BM=bm, BN=bn, BK=bk, IMPRECISE=imprecise, num_warps=num_warps, num_stages=num_stages)
    return c
