"""Loops that read row vectors: one loaded before the loop and broadcast in it, one loaded in a
pipelined loop of two dots (tests/compiler/test_loop_vectors.py)."""
import compiler as triton
import compiler.language as tl


@triton.jit
def row_scaled_sum_kernel(X, R, Y, n_blocks, BLOCK: tl.constexpr):
    # Y = Σ_i X[i] * R[:, None]: R is loaded once, its broadcast taken in every trip
    offs = tl.arange(0, BLOCK)
    r = tl.load(R + offs)
    acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
    for i in range(n_blocks):
        x = tl.load(X + i * BLOCK * BLOCK + offs[:, None] * BLOCK + offs[None, :])
        acc += x * r[:, None]
    tl.store(Y + offs[:, None] * BLOCK + offs[None, :], acc)


@triton.jit
def scaled_two_dot_kernel(A, B, C, S, Out, n_rows, BM: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr,
                          N_PAD: tl.constexpr):
    # Out = Σ_j ((A · B_jᵀ) * S_j[None, :]) · C_j over blocks j of BN rows of B, C and S; the rows
    # from n_rows to N_PAD are masked off (zero)
    offs_m = tl.arange(0, BM)
    offs_k = tl.arange(0, BK)
    offs_n = tl.arange(0, BN)
    a = tl.load(A + offs_m[:, None] * BK + offs_k[None, :])
    acc = tl.zeros([BM, BK], dtype=tl.float32)
    for start in range(0, N_PAD, BN):
        rows = start + offs_n
        bT = tl.load(B + rows[None, :] * BK + offs_k[:, None], mask=rows[None, :] < n_rows, other=0.0)
        s = tl.load(S + rows, mask=rows < n_rows, other=0.0)
        p = tl.dot(a, bT) * s[None, :]
        c = tl.load(C + rows[:, None] * BK + offs_k[None, :], mask=rows[:, None] < n_rows, other=0.0)
        acc = tl.dot(p.to(tl.float16), c, acc)
    tl.store(Out + offs_m[:, None] * BK + offs_k[None, :], acc)
