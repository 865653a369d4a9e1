"""Kernels written with block pointers (`tl.make_block_ptr`, `tl.advance`) and device-side tensor
descriptors, used by the interpret-mode, PTX and GPU tests."""
import compiler as triton
import compiler.language as tl


@triton.jit
def copy2d_kernel(X, Y, M, N, stride_xm, stride_xn, stride_ym, stride_yn,
                  BM: tl.constexpr, BN: tl.constexpr, PADDING: tl.constexpr):
    """Y[tile] = X[tile] over the padded [M + 2, N + 2] extent of Y: out-of-range X reads are padded."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    src = tl.make_block_ptr(X, shape=(M, N), strides=(stride_xm, stride_xn), offsets=(pid_m * BM, pid_n * BN),
                            block_shape=(BM, BN), order=(1, 0))
    dst = tl.make_block_ptr(Y, shape=(M + 2, N + 2), strides=(stride_ym, stride_yn), offsets=(pid_m * BM, pid_n * BN),
                            block_shape=(BM, BN), order=(1, 0))
    tl.store(dst, tl.load(src, boundary_check=(0, 1), padding_option=PADDING), boundary_check=(0, 1))


@triton.jit
def row_sum_kernel(X, Out, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """Out[m] = Σ_n X[m, n], walking along the rows with tl.advance in a loop."""
    pid = tl.program_id(0)
    tile = tl.make_block_ptr(X, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
    acc = tl.zeros((BM,), tl.float32)
    for _ in range(0, tl.cdiv(N, BN)):
        acc += tl.sum(tl.load(tile, boundary_check=(0, 1), padding_option="zero"), axis=1)
        tile = tl.advance(tile, (0, BN))
    out = tl.make_block_ptr(Out, (M,), (1,), (pid * BM,), (BM,), (0,))
    tl.store(out, acc, boundary_check=(0,))


@triton.jit
def matmul_block_ptr_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                            stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr):
    """C = A @ B, the matmul of tests/compiler/test_ptx.py written with block pointers."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_block = tl.make_block_ptr(a_ptr, (M, K), (stride_am, stride_ak), (pid_m * BLOCK_M, 0), (BLOCK_M, BLOCK_K), (1, 0))
    b_block = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, stride_bn), (0, pid_n * BLOCK_N), (BLOCK_K, BLOCK_N), (1, 0))
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_block, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_block, boundary_check=(0, 1), padding_option="zero")
        accumulator = tl.dot(a, b, accumulator)
        a_block = tl.advance(a_block, (0, BLOCK_K))
        b_block = tl.advance(b_block, (BLOCK_K, 0))
    c_block = tl.make_block_ptr(c_ptr, (M, N), (stride_cm, stride_cn), (pid_m * BLOCK_M, pid_n * BLOCK_N),
                                (BLOCK_M, BLOCK_N), (1, 0))
    tl.store(c_block, accumulator.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))


@triton.jit
def _descriptor_matmul_tile(a_desc, b_desc, c_desc, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr):
    """This program's [BLOCK_M, BLOCK_N] tile of C = A @ B, every access through a descriptor."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        accumulator = tl.dot(a, b, accumulator)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], accumulator.to(c_desc.dtype))


@triton.jit
def matmul_descriptor_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr):
    """C = A @ B for contiguous row-major A [M, K], B [K, N], C [M, N] through device-side descriptors."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    _descriptor_matmul_tile(a_desc, b_desc, c_desc, K, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def matmul_host_descriptor_kernel(a_desc, b_desc, c_desc, K, BLOCK_K: tl.constexpr):
    """C = A @ B through host descriptors (TensorDescriptor.from_tensor), block shapes from the host."""
    BLOCK_M: tl.constexpr = a_desc.block_shape[0]
    BLOCK_N: tl.constexpr = b_desc.block_shape[1]
    _descriptor_matmul_tile(a_desc, b_desc, c_desc, K, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def padded_copy_kernel(src_desc, Y, stride_y):
    """Y[tile] = src_desc's tile at (pid_m, pid_n): out-of-range reads take the descriptor's padding."""
    BM: tl.constexpr = src_desc.block_shape[0]
    BN: tl.constexpr = src_desc.block_shape[1]
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    x = src_desc.load([pid_m * BM, pid_n * BN])
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], x)


@triton.jit
def descriptor_atomic_add_kernel(Acc, X, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """Acc[M, N] += X's tile, every program adding its tile into the same [0, 0] block of Acc."""
    desc = tl.make_tensor_descriptor(Acc, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    rows = tl.arange(0, BM)
    cols = tl.arange(0, BN)
    x = tl.load(X + tl.program_id(0) * BM * BN + rows[:, None] * BN + cols[None, :])
    desc.atomic_add([0, 0], x)


@triton.jit
def descriptor_atomic_kernel(Out, X, M, N, BM: tl.constexpr, BN: tl.constexpr, KIND: tl.constexpr):
    """Every program applies `desc.atomic_<KIND>` of its tile of X to the same [0, 0] block of Out."""
    desc = tl.make_tensor_descriptor(Out, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    rows = tl.arange(0, BM)
    cols = tl.arange(0, BN)
    x = tl.load(X + tl.program_id(0) * BM * BN + rows[:, None] * BN + cols[None, :])
    if KIND == "min":
        desc.atomic_min([0, 0], x)
    elif KIND == "max":
        desc.atomic_max([0, 0], x)
    else:
        desc.atomic_add([0, 0], x)


@triton.jit
def branch_advance_kernel(X, Out, N, SKIP, B: tl.constexpr):
    """Out[pid] = X[pid, :] block starting at column B if pid < SKIP else at 0 (a block pointer
    advanced in one branch of a runtime if)."""
    pid = tl.program_id(0)
    p = tl.make_block_ptr(X, (tl.num_programs(0), N), (N, 1), (pid, 0), (1, B), (1, 0))
    if pid < SKIP:
        p = tl.advance(p, (0, B))
    tl.store(tl.make_block_ptr(Out, (tl.num_programs(0), B), (B, 1), (pid, 0), (1, B), (1, 0)),
             tl.load(p, boundary_check=(1,)), boundary_check=(1,))
