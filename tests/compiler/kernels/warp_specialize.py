"""Kernels with warp-specialized loops (compiler/backend/warp_specialize.py), used by
tests/compiler/test_warp_specialize.py: tutorial 09's matmul over host descriptors with its K loop
marked `tl.range(..., warp_specialize=...)`, and its persistent form over descriptors made in the
kernel, marked on the loop over tiles as the tutorial marks it."""
import compiler as triton
import compiler.language as tl


@triton.jit
def matmul_ws_kernel(a_desc, b_desc, c_desc, M, N, K, WARP_SPECIALIZE: tl.constexpr):
    """C = A @ Bᵀ, B given as [N, K]; a program's K loop may have no iteration (K = 0: C = 0)."""
    BLOCK_M: tl.constexpr = a_desc.block_shape[0]
    BLOCK_K: tl.constexpr = a_desc.block_shape[1]
    BLOCK_N: tl.constexpr = b_desc.block_shape[0]
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(tl.cdiv(K, BLOCK_K), warp_specialize=WARP_SPECIALIZE):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([off_n, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def device_matmul_persistent_ws_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                       BLOCK_K: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                                       WARP_SPECIALIZE: tl.constexpr):
    """C = A @ Bᵀ (A [M, K], B [N, K], C [M, N], contiguous) through descriptors made in the kernel,
    each program looping over tiles, that loop marked warp_specialize (tutorial 09's
    matmul_kernel_descriptor_persistent): its K loop is the one specialized."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    tiles_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, warp_specialize=WARP_SPECIALIZE):
        off_m = (tile // tiles_n) * BLOCK_M
        off_n = (tile % tiles_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([off_m, k * BLOCK_K])
            b = b_desc.load([off_n, k * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
