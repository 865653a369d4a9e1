"""Kernels that describe their launches for the profiler (`@jit(launch_metadata=...)`), as
tutorial 09's matmuls do: written for the profiler tests."""
from __future__ import annotations

import compiler as triton
import compiler.language as tl


def axpy_metadata(grid, kernel, args):
    n = args["n"]
    width = args["x_ptr"].element_size() * 8
    return {"name": f"{kernel.name} [n={n}, BLOCK={args['BLOCK']}, grid={grid}]",
            f"flops{width}": 2.0 * n, "bytes": 3 * args["x_ptr"].element_size() * n}


@triton.jit(launch_metadata=axpy_metadata)
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr = 128):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 256}, num_warps=4)],
                 key=["n"])
@triton.jit(launch_metadata=axpy_metadata)
def axpy_autotuned(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
