"""Loops without a dot that give tl.range a num_stages: their loads go through cp.async stages
(compiler/backend/load_pipeline.py). Tests: tests/compiler/test_load_pipeline.py."""
import compiler as triton
import compiler.language as tl


@triton.jit
def copy_in_place_kernel(src, N, N_STAGES: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """Triton's test_hooks loop: each block read and written back, num_stages from the caller."""
    offsets = tl.arange(0, BLOCK_SIZE)
    max_iters = tl.cdiv(N, BLOCK_SIZE)
    for _ in tl.range(max_iters, num_stages=N_STAGES):
        x = tl.load(src + offsets, mask=offsets < N)
        tl.store(src + offsets, x, mask=offsets < N)
        offsets += BLOCK_SIZE


@triton.jit
def axpy_rows_kernel(X, Y, Out, n_rows, n_cols, stride, alpha, STAGES: tl.constexpr, BLOCK: tl.constexpr):
    """Out[r] = alpha * X[r] + Y[r] row by row (two pipelined loads a row, ragged columns), and the
    running column sums of X stored after the loop."""
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    pid, programs = tl.program_id(0), tl.num_programs(0)
    for i in tl.range(0, tl.cdiv(n_rows - pid, programs), num_stages=STAGES):
        r = pid + i * programs
        x = tl.load(X + r * stride + cols, mask=cols < n_cols)
        y = tl.load(Y + r * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(Out + r * stride + cols, alpha * x + y, mask=cols < n_cols)
        acc += x.to(tl.float32)
    tl.store(Out + n_rows * stride + tl.program_id(0) * BLOCK + cols, acc.to(Out.dtype.element_ty))


@triton.jit
def plain_range_kernel(X, Out, n_rows, BLOCK: tl.constexpr):
    """The same row loop without num_stages on it: not pipelined (Triton's rule)."""
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(0, n_rows):
        acc += tl.load(X + r * BLOCK + cols)
    tl.store(Out + cols, acc)


@triton.jit
def other_value_kernel(X, Out, n_rows, n_cols, BLOCK: tl.constexpr):
    """A load with a nonzero `other`: not pipelined (cp.async fills masked-off elements with zero)."""
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in tl.range(0, n_rows, num_stages=3):
        acc += tl.load(X + r * BLOCK + cols, mask=cols < n_cols, other=1.0)
    tl.store(Out + cols, acc)


@triton.jit
def column_max_kernel(X, Out, n_blocks, STAGES: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    """Out[c] = max over all rows of X[:, c], R rows a block: a reduction across warps in the body,
    whose shared memory must not meet the stages'."""
    rows = tl.arange(0, R)[:, None]
    cols = tl.arange(0, C)[None, :]
    best = tl.full([C], float("-inf"), tl.float32)
    for i in tl.range(0, n_blocks, num_stages=STAGES):
        x = tl.load(X + (i * R + rows) * C + cols)
        best = tl.maximum(best, tl.max(x, axis=0))
    tl.store(Out + tl.arange(0, C), best)
