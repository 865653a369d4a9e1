"""Triton's tutorial 01, with the import lines changed to blocktune's."""
import compiler as triton
import compiler.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)


if __name__ == "__main__":
    import numpy as np
    import os

    os.environ.setdefault("BLOCKTUNE_INTERPRET", "1")  # no GPU needed for this demo
    n = 98432
    x, y = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    out = np.full(n, np.nan, dtype=np.float32)
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)
    print("max error:", float(np.abs(out - (x + y)).max()))
