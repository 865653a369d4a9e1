"""A batched tl.dot ([B, M, K] @ [B, K, N]), as Triton's test_dot3d writes it, with an optional
accumulator."""
import compiler as triton
import compiler.language as tl


@triton.jit
def batched_dot_kernel(Q, Kt, Acc, O, stride_qb, stride_qm, stride_kb, stride_kk, stride_ob, stride_om,
                       B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                       USE_ACC: tl.constexpr, OUT_DTYPE: tl.constexpr, PRECISION: tl.constexpr):
    b = tl.arange(0, B)[:, None, None]
    m = tl.arange(0, M)[None, :, None]
    n = tl.arange(0, N)[None, None, :]
    kr = tl.arange(0, K)[None, None, :]   # k as the last (column) dim of Q
    kc = tl.arange(0, K)[None, :, None]   # k as the middle (row) dim of Kt
    q = tl.load(Q + b * stride_qb + m * stride_qm + kr)
    k = tl.load(Kt + b * stride_kb + kc * stride_kk + n)
    out = b * stride_ob + m * stride_om + n
    if USE_ACC:
        o = tl.dot(q, k, tl.load(Acc + out), input_precision=PRECISION, out_dtype=OUT_DTYPE)
    else:
        o = tl.dot(q, k, input_precision=PRECISION, out_dtype=OUT_DTYPE)
    tl.store(O + out, o)


@triton.jit
def multidim_dot_kernel(X, Y, Z, RANK: tl.constexpr, TRANS_A: tl.constexpr, TRANS_B: tl.constexpr):
    """[2, ..., 32, 32] blocks (RANK dims): tl.trans swaps the last two dims, tl.dot batches over the
    leading ones (Triton's test_dot_multidim)."""
    x = tl.load(X + tl.arange(0, 256 << RANK)).reshape([2] * (RANK - 2) + [32, 32])
    y = tl.load(Y + tl.arange(0, 256 << RANK)).reshape([2] * (RANK - 2) + [32, 32])
    if TRANS_A:
        x = tl.trans(x)
    if TRANS_B:
        y = tl.trans(y)
    z = tl.dot(x, y)
    tl.store(Z + tl.arange(0, 256 << RANK), z.reshape([256 << RANK]))
