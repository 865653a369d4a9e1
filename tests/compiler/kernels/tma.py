"""Kernels whose tensor descriptors go through TMA on sm_90 (compiler/backend/tma.py), used by
tests/compiler/test_tma.py: a scaled copy (one load and one store through shared memory, any rank)
and matmuls in the shape of Triton's tutorial 09 (`b.T` from an [N, K] descriptor, a loop over K, a
persistent loop over tiles around it); the device_* kernels make their descriptors in the kernel."""
import compiler as triton
import compiler.language as tl
from tests.compiler.kernels.block_pointers import padded_copy_kernel


@triton.jit
def scaled_copy_kernel(in_desc, out_desc, scale):
    """out[tile] = in[tile] * scale, the tile at program (i, j, k) over the descriptors' dims."""
    RANK: tl.constexpr = len(in_desc.block_shape)
    if RANK == 1:
        offs = [tl.program_id(0) * in_desc.block_shape[0]]
    elif RANK == 2:
        offs = [tl.program_id(0) * in_desc.block_shape[0], tl.program_id(1) * in_desc.block_shape[1]]
    else:
        offs = [tl.program_id(2) * in_desc.block_shape[0], tl.program_id(0) * in_desc.block_shape[1],
                tl.program_id(1) * in_desc.block_shape[2]]
    x = in_desc.load(offs)
    out_desc.store(offs, (x * scale).to(out_desc.dtype))


@triton.jit
def _tile_dot(a_desc, b_desc, off_m, off_n, K, BLOCK_K: tl.constexpr):
    BLOCK_M: tl.constexpr = a_desc.block_shape[0]
    BLOCK_N: tl.constexpr = b_desc.block_shape[0]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([off_n, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
    return acc


@triton.jit
def matmul_tma_kernel(a_desc, b_desc, c_desc, M, N, K):
    """C = A @ Bᵀ with B given as [N, K] (tutorial 09's matmul_kernel_tma)."""
    BLOCK_M: tl.constexpr = a_desc.block_shape[0]
    BLOCK_K: tl.constexpr = a_desc.block_shape[1]
    BLOCK_N: tl.constexpr = b_desc.block_shape[0]
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    acc = _tile_dot(a_desc, b_desc, off_m, off_n, K, BLOCK_K)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def _persistent_tiles(a_desc, b_desc, c_desc, M, N, K, NUM_PROGRAMS: tl.constexpr):
    """Tiles pid, pid + NUM_PROGRAMS, … of C = A @ Bᵀ: every tile runs the pipelined K loop again."""
    BLOCK_M: tl.constexpr = a_desc.block_shape[0]
    BLOCK_K: tl.constexpr = a_desc.block_shape[1]
    BLOCK_N: tl.constexpr = b_desc.block_shape[0]
    tiles_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    for tile in range(tl.program_id(0), num_tiles, NUM_PROGRAMS):
        off_m = (tile // tiles_n) * BLOCK_M
        off_n = (tile % tiles_n) * BLOCK_N
        acc = _tile_dot(a_desc, b_desc, off_m, off_n, K, BLOCK_K)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def matmul_tma_persistent_kernel(a_desc, b_desc, c_desc, M, N, K, NUM_PROGRAMS: tl.constexpr):
    """The same, each program looping over tiles (tutorial 09's persistent kernel)."""
    _persistent_tiles(a_desc, b_desc, c_desc, M, N, K, NUM_PROGRAMS)


@triton.jit
def matmul_tma_persistent_pointer_store_kernel(a_desc, b_desc, c_ptr, M, N, K, stride_cm, NUM_PROGRAMS: tl.constexpr):
    """The persistent loop with an epilogue of masked pointer stores, which takes the accumulator
    through a layout conversion in shared memory while the next tile's copies are landing."""
    BLOCK_M: tl.constexpr = a_desc.block_shape[0]
    BLOCK_K: tl.constexpr = a_desc.block_shape[1]
    BLOCK_N: tl.constexpr = b_desc.block_shape[0]
    tiles_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tiles_n, NUM_PROGRAMS):
        rows = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = _tile_dot(a_desc, b_desc, (tile // tiles_n) * BLOCK_M, (tile % tiles_n) * BLOCK_N, K, BLOCK_K)
        tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def device_padded_copy_kernel(X, Y, M, N, stride_x, stride_y, BM: tl.constexpr, BN: tl.constexpr,
                              PADDING: tl.constexpr):
    """block_pointers.padded_copy_kernel through a descriptor made in the kernel: Y[tile] (plain
    stores, Y covers every tile) = X's tile, the elements past X's [M, N] its padding."""
    src = tl.make_tensor_descriptor(X, shape=[M, N], strides=[stride_x, 1], block_shape=[BM, BN], padding_option=PADDING)
    padded_copy_kernel(src, Y, stride_y)


@triton.jit
def device_matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                    BLOCK_K: tl.constexpr, NUM_PROGRAMS: tl.constexpr):
    """C = A @ Bᵀ (A [M, K], B [N, K], C [M, N], contiguous) through descriptors made in the kernel,
    each program looping over tiles (tutorial 09's matmul_kernel_descriptor_persistent)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    _persistent_tiles(a_desc, b_desc, c_desc, M, N, K, NUM_PROGRAMS)


@triton.jit
def loop_carried_descriptor_kernel(a_desc, b_desc, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C[BM, BN] (row-major) = A[:BM] @ B[:BN]ᵀ with A's descriptor carried through the K loop."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    d = a_desc
    for k in range(0, K, BK):
        a = d.load([0, k])
        b = b_desc.load([0, k])
        acc = tl.dot(a, b.T, acc)
        d = a_desc
    tl.store(c_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], acc)



@triton.jit
def device_remade_descriptor_kernel(X, M, N, BM: tl.constexpr, BN: tl.constexpr, EVERY: tl.constexpr):
    """X[rows of this program] += 1 tile by tile along N, through a descriptor made before the loop
    and made again (the same map) every EVERY-th tile: one scratch slot serves all of them."""
    row = tl.program_id(0) * BM
    desc = tl.make_tensor_descriptor(X, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    for j in range(0, tl.cdiv(N, BN)):
        if j % EVERY == 0:
            desc = tl.make_tensor_descriptor(X, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        desc.store([row, j * BN], desc.load([row, j * BN]) + 1)
