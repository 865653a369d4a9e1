"""Triton's tutorials 01 (vector add), 02 (fused softmax), 03 (matmul) and 05 (layer-norm forward).

The kernels are verbatim from the Triton tutorials except the import lines (01, 02 and 05 come from
bench/tutorial_kernels.py, 03 from bench/matmul_kernels.py, the text the benchmarks run); host wrappers keep the
tutorials' code where it does not depend on a CUDA device (DEVICE checks and occupancy queries are
left out: interpret mode runs on CPU tensors).
"""
import torch

import compiler as triton
import compiler.language as tl

from . import bench_kernels

# Tutorials 01, 02 (current version) and 05 exactly as Triton writes them: one copy of the text,
# bench/tutorial_kernels.py, which the benchmarks run under Triton and blocktune.
_TUTORIALS = bench_kernels("tutorial_kernels.py")


# ---------------------------------------------------------------------------------------------
# 01-vector-add.py

add_kernel = _TUTORIALS.add_kernel


def add(x: torch.Tensor, y: torch.Tensor, BLOCK_SIZE=1024):
    # We need to preallocate the output.
    output = torch.empty_like(x)
    n_elements = output.numel()
    # The SPMD launch grid denotes the number of kernel instances that run in parallel.
    # It is analogous to CUDA launch grids. It can be either Tuple[int], or Callable(metaparameters) -> Tuple[int].
    # In this case, we use a 1D grid where the size is the number of blocks:
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )  # noqa: E731
    # NOTE:
    #  - Each torch.tensor object is implicitly converted into a pointer to its first element.
    #  - `triton.jit`'ed functions can be indexed with a launch grid to obtain a callable GPU kernel.
    #  - Don't forget to pass meta-parameters as keywords arguments.
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    # We return a handle to z but, since GPU kernels are asynchronous, this is called before the kernel finishes
    return output


# ---------------------------------------------------------------------------------------------
# 02-fused-softmax.py (current version: persistent programs striding over rows with tl.range)

softmax_kernel = _TUTORIALS.softmax_kernel


def softmax(x, num_programs=None):
    n_rows, n_cols = x.shape

    # The block size of each loop iteration is the smallest power of two greater than the number of columns in `x`
    BLOCK_SIZE = triton.next_power_of_2(n_cols)

    # Another trick we can use is to ask the compiler to use more threads per row by
    # increasing the number of warps (`num_warps`) over which each row is distributed.
    # You will see in the next tutorial how to auto-tune this value in a more natural
    # way so you don't have to come up with manual heuristics yourself.
    num_warps = 8

    # Number of software pipelining stages.
    num_stages = 2

    # Allocate output
    y = torch.empty_like(x)

    # (the tutorial sizes the persistent grid from the SM count and occupancy; on the CPU we pick it)
    num_programs = min(num_programs or n_rows, n_rows)

    # Create a number of persistent programs.
    softmax_kernel[(num_programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE=BLOCK_SIZE,
                                         num_stages=num_stages, num_warps=num_warps)
    return y


# 02-fused-softmax.py (the original one-row-per-program version)

@triton.jit
def softmax_kernel_v1(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    # The rows of the softmax are independent, so we parallelize across those
    row_idx = tl.program_id(0)
    # The stride represents how much we need to increase the pointer to advance 1 row
    row_start_ptr = input_ptr + row_idx * input_row_stride
    # The block size is the next power of two greater than n_cols, so we can fit each
    # row in a single block
    col_offsets = tl.arange(0, BLOCK_SIZE)
    input_ptrs = row_start_ptr + col_offsets
    # Load the row into SRAM, using a mask since BLOCK_SIZE may be > than n_cols
    row = tl.load(input_ptrs, mask=col_offsets < n_cols, other=-float('inf'))
    # Subtract maximum for numerical stability
    row_minus_max = row - tl.max(row, axis=0)
    # Note that exponentiation in Triton is fast but approximate (i.e., think __expf in CUDA)
    numerator = tl.exp(row_minus_max)
    denominator = tl.sum(numerator, axis=0)
    softmax_output = numerator / denominator
    # Write back output to DRAM
    output_row_start_ptr = output_ptr + row_idx * output_row_stride
    output_ptrs = output_row_start_ptr + col_offsets
    tl.store(output_ptrs, softmax_output, mask=col_offsets < n_cols)


def softmax_v1(x):
    n_rows, n_cols = x.shape
    # The block size is the smallest power of two greater than the number of columns in `x`
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    # Another trick we can use is to ask the compiler to use more threads per row by
    # increasing the number of warps (`num_warps`) over which each row is distributed.
    # You will see in the next tutorial how to auto-tune this value in a more natural
    # way so you don't have to come up with manual heuristics yourself.
    num_warps = 4
    if BLOCK_SIZE >= 2048:
        num_warps = 8
    if BLOCK_SIZE >= 4096:
        num_warps = 16
    # Allocate output
    y = torch.empty_like(x)
    # Enqueue kernel. The 1D launch grid is simple: we have one kernel instance per row o
    # f the input matrix
    softmax_kernel_v1[(n_rows, )](
        y,
        x,
        x.stride(0),
        y.stride(0),
        n_cols,
        num_warps=num_warps,
        BLOCK_SIZE=BLOCK_SIZE,
    )
    return y


# ---------------------------------------------------------------------------------------------
# 05-layer-norm.py (forward)

_layer_norm_fwd_fused = _TUTORIALS._layer_norm_fwd_fused


def layer_norm_forward(x, normalized_shape, weight, bias, eps, block_size=None):
    """`LayerNorm.forward` of the tutorial (without autograd); `block_size` forces a smaller block
    so that the kernel's loops run more than once."""
    # allocate output
    y = torch.empty_like(x)
    # reshape input data into 2D tensor
    x_arg = x.reshape(-1, x.shape[-1])
    M, N = x_arg.shape
    mean = torch.empty((M, ), dtype=torch.float32, device=x.device)
    rstd = torch.empty((M, ), dtype=torch.float32, device=x.device)
    # Less than 64KB per feature: enqueue fused kernel
    MAX_FUSED_SIZE = 65536 // x.element_size()
    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(N))
    if block_size is not None:
        BLOCK_SIZE = block_size
    if N > MAX_FUSED_SIZE:
        raise RuntimeError("This layer norm doesn't support feature dim >= 64KB.")
    # heuristics for number of warps
    num_warps = min(max(BLOCK_SIZE // 256, 1), 8)
    # enqueue kernel
    _layer_norm_fwd_fused[(M, )](  #
        x_arg, y, weight, bias, mean, rstd,  #
        x_arg.stride(0), N, eps,  #
        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, num_ctas=1)
    return y, mean, rstd


# ---------------------------------------------------------------------------------------------
# 03-matrix-multiplication.py: bench/matmul_kernels.py, the one copy of the tutorial's text. The
# interpreter tunes over the tutorial's configs no larger than 64×64 (the CPU runs every config).

_MATMUL = bench_kernels("matmul_kernels.py")
matmul_kernel = _MATMUL.matmul_kernel
leaky_relu = _MATMUL.leaky_relu
INTERPRETER_CONFIGS = [c for c in _MATMUL.get_autotune_config()
                       if c.kwargs["BLOCK_SIZE_M"] <= 64 and c.kwargs["BLOCK_SIZE_N"] <= 64][:2]


def matmul(a, b, activation=""):
    """The tutorial's host function, autotuning over INTERPRETER_CONFIGS."""
    if matmul_kernel.configs != INTERPRETER_CONFIGS:   # the module is shared with other tests
        matmul_kernel.configs = INTERPRETER_CONFIGS
        matmul_kernel.cache.clear()
    return _MATMUL.matmul(a, b, activation)
