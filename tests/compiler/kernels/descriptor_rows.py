"""Kernels that read and write rows of a 2-D tensor through a tensor descriptor picked by a block of
row indices (desc.gather / desc.scatter, TMA gather4/scatter4 in Triton), and the functional
interface tl.load_tensor_descriptor / tl.store_tensor_descriptor."""
import compiler as triton
import compiler.language as tl


@triton.jit
def gather_rows_kernel(X, Rows, Out, M, N, col, PADDING: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    """Out[i, :] = X[Rows[i], col:col + C] (out-of-bounds elements are the descriptor's padding)."""
    desc = tl.make_tensor_descriptor(X, shape=[M, N], strides=[N, 1], block_shape=[1, C], padding_option=PADDING)
    rows = tl.load(Rows + tl.arange(0, R))
    block = desc.gather(rows, col)
    tl.store(Out + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :], block)


@triton.jit
def scatter_rows_kernel(Src, Rows, Y, M, N, col, R: tl.constexpr, C: tl.constexpr):
    """Y[Rows[i], col:col + C] = Src[i, :], in-bounds elements only."""
    desc = tl.make_tensor_descriptor(Y, shape=[M, N], strides=[N, 1], block_shape=[1, C])
    rows = tl.load(Rows + tl.arange(0, R))
    block = tl.load(Src + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    desc.scatter(block, rows, col)


@triton.jit
def gather_dot_kernel(A, B, Out, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Out = A @ B with both operands' tiles gathered row by row in a loop (Triton's
    test_tma_gather_dot_pipeline): A [BM, K], B [K, BN], contiguous."""
    a_desc = tl.make_tensor_descriptor(A, [BM, K], [K, 1], [1, BK])
    b_desc = tl.make_tensor_descriptor(B, [K, BN], [BN, 1], [1, BN])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = a_desc.gather(tl.arange(0, BM), k)
        b = b_desc.gather(tl.arange(0, BK) + k, 0)
        acc = tl.dot(a, b, acc=acc)
    tl.store(Out + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], acc)


@triton.jit
def functional_copy_kernel(X, Y, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """Y = X blockwise through tl.load_tensor_descriptor / tl.store_tensor_descriptor; the output
    descriptor is made again every third step of a loop (a loop-carried descriptor)."""
    src = tl.make_tensor_descriptor(X, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(Y, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    m = tl.program_id(0) * BM
    for n in range(0, N, BN):
        if (n // BN) % 3 == 2:
            dst = tl.make_tensor_descriptor(Y, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        tl.static_assert(isinstance(dst, tl.tensor_descriptor))
        tl.store_tensor_descriptor(dst, [m, n], tl.load_tensor_descriptor(src, [m, n]))
