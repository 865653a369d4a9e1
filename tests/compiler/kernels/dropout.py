"""Triton's tutorial 04 (low-memory dropout), rewritten: dropout with a stored keep-mask, and seeded
dropout that regenerates its mask from (seed, offset) with tl.rand instead of storing it."""
import compiler as triton
import compiler.language as tl


@triton.jit
def dropout_kernel(x_ptr, x_keep_ptr, output_ptr, n_elements, p, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    keep = tl.load(x_keep_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, tl.where(keep, x / (1 - p), 0.0), mask=mask)


@triton.jit
def seeded_dropout_kernel(x_ptr, output_ptr, n_elements, p, seed, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    # the same (seed, offset) gives the same number: the backward pass regenerates the mask
    keep = tl.rand(seed, offsets) > p
    tl.store(output_ptr + offsets, tl.where(keep, x / (1 - p), 0.0), mask=mask)


@triton.jit
def seeded_dropout_rows_kernel(x_ptr, output_ptr, seeds_ptr, n_cols, stride, p, BLOCK_SIZE: tl.constexpr):
    """One seed per row (the tutorial's exercise): row r uses seeds[r]."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    seed = tl.load(seeds_ptr + row)
    x = tl.load(x_ptr + row * stride + cols, mask=mask)
    keep = tl.rand(seed, cols) > p
    tl.store(output_ptr + row * stride + cols, tl.where(keep, x / (1 - p), 0.0), mask=mask)
