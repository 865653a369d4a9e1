"""Triton's tutorial 09 (persistent matmul), its tensor-descriptor kernels, written for Triton: the
benchmark (bench/matmul_tma.py) loads it under Triton and under blocktune (only the import lines
change, bench/common.py); tests/compiler/kernels/tutorials_more.py runs it in interpret mode.

A [M, K] and B [N, K] (B transposed, as the tutorial keeps it), C = A @ B.T:
- `matmul_kernel_descriptor_persistent`: NUM_SMS programs walk the output tiles in grouped order
  through descriptors made in the kernel, which needs `triton.set_allocator` under Triton;
- `matmul_kernel_tma`: a program per tile through host descriptors (`TensorDescriptor`);
- `matmul_kernel_tma_persistent`: NUM_SMS programs, host descriptors.
Host descriptors are made with a placeholder block shape that each config's pre-hook sets, as the
tutorial does; `autotuned(kernel, configs)` puts a kernel behind the autotuner.
"""
import torch

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS):
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def matmul_kernel_descriptor_persistent(a_ptr, b_ptr, c_ptr, M, N, K,
                                        BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                                        BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                                        EPILOGUE_SUBTILE: tl.constexpr, NUM_SMS: tl.constexpr,
                                        WARP_SPECIALIZE: tl.constexpr):
    dtype = c_ptr.dtype.element_ty
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    num_tiles = num_pid_m * num_pid_n

    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_SIZE_N, BLOCK_SIZE_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                       block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_N if not EPILOGUE_SUBTILE else BLOCK_SIZE_N // 2])

    # the epilogue's tile counter runs one tile behind (as the tutorial writes it)
    tile_id_c = start_pid - NUM_SMS
    num_pid_in_group = GROUP_SIZE_M * num_pid_n

    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        offs_am = pid_m * BLOCK_SIZE_M
        offs_bn = pid_n * BLOCK_SIZE_N
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_bn, offs_k])
            accumulator = tl.dot(a, b.T, accumulator)

        tile_id_c += NUM_SMS
        pid_m, pid_n = _compute_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        offs_cm = pid_m * BLOCK_SIZE_M
        offs_cn = pid_n * BLOCK_SIZE_N

        if EPILOGUE_SUBTILE:
            acc = tl.reshape(accumulator, (BLOCK_SIZE_M, 2, BLOCK_SIZE_N // 2))
            acc = tl.permute(acc, (0, 2, 1))
            acc0, acc1 = tl.split(acc)
            c_desc.store([offs_cm, offs_cn], acc0.to(dtype))
            c_desc.store([offs_cm, offs_cn + BLOCK_SIZE_N // 2], acc1.to(dtype))
        else:
            c_desc.store([offs_cm, offs_cn], accumulator.to(dtype))


def alloc_fn(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


def matmul_descriptor_persistent(a, b, num_sms, BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8,
                                 num_stages=3, num_warps=8, warp_specialize=False):
    """C = A @ B.T for A [M, K] and B [N, K] (both contiguous)."""
    assert a.shape[1] == b.shape[1], "incompatible dimensions"
    M, K = a.shape
    N, K = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    triton.set_allocator(alloc_fn)  # device-side descriptors need global scratch memory under Triton
    grid = lambda META: (min(num_sms, triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"])), )  # noqa: E731
    matmul_kernel_descriptor_persistent[grid](
        a, b, c, M, N, K, BLOCK_SIZE_M=BLOCK_SIZE_M, BLOCK_SIZE_N=BLOCK_SIZE_N, BLOCK_SIZE_K=BLOCK_SIZE_K,
        GROUP_SIZE_M=GROUP_SIZE_M, EPILOGUE_SUBTILE=False, NUM_SMS=num_sms, WARP_SPECIALIZE=warp_specialize,
        num_stages=num_stages, num_warps=num_warps)
    return c


@triton.jit
def matmul_kernel_tma(a_desc, b_desc, c_desc, M, N, K,
                      BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                      GROUP_SIZE_M: tl.constexpr):
    dtype = tl.float16
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    pid_m, pid_n = _compute_pid(pid, GROUP_SIZE_M * num_pid_n, num_pid_m, GROUP_SIZE_M, 0)
    offs_am = pid_m * BLOCK_SIZE_M
    offs_bn = pid_n * BLOCK_SIZE_N
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(k_tiles):
        offs_k = k * BLOCK_SIZE_K
        a = a_desc.load([offs_am, offs_k])
        b = b_desc.load([offs_bn, offs_k])
        accumulator = tl.dot(a, b.T, accumulator)
    c_desc.store([offs_am, offs_bn], accumulator.to(dtype))


@triton.jit
def matmul_kernel_tma_persistent(a_desc, b_desc, c_desc, M, N, K,
                                 BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                                 BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
    dtype = tl.float16
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        offs_am = pid_m * BLOCK_SIZE_M
        offs_bn = pid_n * BLOCK_SIZE_N
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_bn, offs_k])
            accumulator = tl.dot(a, b.T, accumulator)
        c_desc.store([offs_am, offs_bn], accumulator.to(dtype))


def set_block_shapes(nargs):
    bm, bn, bk = nargs["BLOCK_SIZE_M"], nargs["BLOCK_SIZE_N"], nargs["BLOCK_SIZE_K"]
    if isinstance(nargs.get("a_desc"), TensorDescriptor):
        nargs["a_desc"].block_shape = [bm, bk]
        nargs["b_desc"].block_shape = [bn, bk]
        nargs["c_desc"].block_shape = [bm, bn]


def configs(host_descriptors: bool):
    return [triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8},
                          num_stages=s, num_warps=w, pre_hook=set_block_shapes if host_descriptors else None)
            for bn in (128, 256) for bk in (64, 128) for s in (3, 4) for w in (4, 8)]


def prune(configs, named_args, **kwargs):
    # the stage ring and the epilogue tile must fit in the H100's 228 KB of shared memory
    keep = []
    for c in configs:
        kw = c.kwargs
        stage = (kw["BLOCK_SIZE_M"] + kw["BLOCK_SIZE_N"]) * kw["BLOCK_SIZE_K"] * 2
        if stage * c.num_stages + kw["BLOCK_SIZE_M"] * kw["BLOCK_SIZE_N"] * 2 <= 228 * 1024:
            keep.append(c)
    return keep


def autotuned(kernel, configs, key=("M", "N", "K")):
    return triton.autotune(configs=configs, key=list(key), prune_configs_by={"early_config_prune": prune})(kernel)


def _host_descriptors(a, b, c):
    placeholder = [1, 1]
    return (TensorDescriptor.from_tensor(a, placeholder), TensorDescriptor.from_tensor(b, placeholder),
            TensorDescriptor.from_tensor(c, placeholder))


def matmul_tma(kernel, a, b):
    """`kernel`: matmul_kernel_tma behind the autotuner."""
    M, K = a.shape
    N = b.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]), )  # noqa: E731
    kernel[grid](*_host_descriptors(a, b, c), M, N, K)
    return c


def matmul_tma_persistent(kernel, a, b, num_sms):
    """`kernel`: matmul_kernel_tma_persistent behind the autotuner."""
    M, K = a.shape
    N = b.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (min(num_sms, triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"])), )  # noqa: E731
    kernel[grid](*_host_descriptors(a, b, c), M, N, K, NUM_SMS=num_sms)
    return c


def matmul_descriptor_persistent_tuned(kernel, a, b, num_sms, warp_specialize=False):
    """`kernel`: matmul_kernel_descriptor_persistent behind the autotuner (key: add WARP_SPECIALIZE)."""
    M, K = a.shape
    N = b.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    triton.set_allocator(alloc_fn)
    grid = lambda META: (min(num_sms, triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"])), )  # noqa: E731
    kernel[grid](a, b, c, M, N, K, EPILOGUE_SUBTILE=False, NUM_SMS=num_sms, WARP_SPECIALIZE=warp_specialize)
    return c
