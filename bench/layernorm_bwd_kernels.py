"""Triton's tutorial 05 backward pass (layer-norm dx fused with partial dw/db, then the dw/db
reduction), written for Triton: the benchmark loads it under Triton and under blocktune (only the
import lines change, bench/common.py), and tests/compiler/kernels/tutorials_more.py runs it in
interpret mode.

The partial dw/db of the rows that share `row % GROUP_SIZE_M` are accumulated into one buffer row
under a spin lock (`tl.atomic_cas`), released with `tl.atomic_xchg` after a `tl.debug_barrier`.
"""
import torch

import triton
import triton.language as tl


@triton.jit
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N,
                             GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    # the lock of this row's group, and the group's "already written" flag after the locks
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.)
    wdy = tl.where(mask, w * dy, 0.)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = dy.to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:  # the first row of the group writes, the others add
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.debug_barrier()  # every thread's stores are issued before the lock is released
    tl.atomic_xchg(Lock, 0)


@triton.jit
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.)
        db += tl.load(DB + offs, mask=mask, other=0.)
    tl.store(FINAL_DW + cols, tl.sum(dw, axis=0), mask=cols < N)
    tl.store(FINAL_DB + cols, tl.sum(db, axis=0), mask=cols < N)


def group_size_m(N):
    """The tutorial's heuristic: more lock groups for narrower rows (less contention)."""
    if N <= 1024:
        return 256
    if N <= 4096:
        return 128
    if N <= 8192:
        return 96
    return 64


def layer_norm_backward(dy, x, w, mean, rstd, group_m=None):
    """(dx, dw, db) of y = layer_norm(x) * w + b, given the forward pass's mean and rstd."""
    N = x.shape[-1]
    x_arg = x.reshape(-1, N)
    M = x_arg.shape[0]
    GROUP_SIZE_M = group_m or group_size_m(N)
    locks = torch.zeros(2 * GROUP_SIZE_M, dtype=torch.int32, device=w.device)
    _dw = torch.zeros((GROUP_SIZE_M, N), dtype=x.dtype, device=w.device)
    _db = torch.zeros((GROUP_SIZE_M, N), dtype=x.dtype, device=w.device)
    dw = torch.empty((N, ), dtype=w.dtype, device=w.device)
    db = torch.empty((N, ), dtype=w.dtype, device=w.device)
    dx = torch.empty_like(dy)
    BLOCK_SIZE_N = triton.next_power_of_2(N)
    num_warps = min(max(BLOCK_SIZE_N // 256, 1), 8)
    _layer_norm_bwd_dx_fused[(M, )](dx, dy, _dw, _db, x, w, mean, rstd, locks, x_arg.stride(0), N,
                                    BLOCK_SIZE_N=BLOCK_SIZE_N, GROUP_SIZE_M=GROUP_SIZE_M, num_warps=num_warps)
    grid = lambda meta: (triton.cdiv(N, meta['BLOCK_SIZE_N']), )  # noqa: E731
    _layer_norm_bwd_dwdb[grid](_dw, _db, dw, db, min(GROUP_SIZE_M, M), N, BLOCK_SIZE_M=32, BLOCK_SIZE_N=128, num_ctas=1)
    return dx, dw, db
