"""Kernels that call noinline @jit functions (device functions of their own on the GPU:
compiler/frontend/device_calls.py). The tests find lines by their text (LINE[...])."""
import compiler as triton
import compiler.language as tl
from tests.compiler.kernels.line_info import tagged_line


@triton.jit(noinline=True)
def scaled_copy(X, Y, n, scale, flip, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)  # LINE: callee load
    s = scale.to(tl.float32)
    if flip:
        s = -s
    tl.store(Y + offs, x * s, mask=offs < n)


@triton.jit
def copy_twice_kernel(X, Y, n, scale, flip, BLOCK: tl.constexpr):
    """Y[:n] = ±scale·X[:n], then Y[BLOCK:BLOCK+n] = 2·X[BLOCK:...]: one callee, two specializations
    (the second call's BLOCK differs only as a compile-time value) and the first one called twice."""
    scaled_copy(X, Y, n, scale, flip, BLOCK)  # LINE: first call
    scaled_copy(X, Y, n, scale, flip, BLOCK)
    scaled_copy(X + BLOCK, Y + BLOCK, n, 2.0, False, BLOCK=128)


@triton.jit(noinline=True)
def plus_one(v):
    return v + 1.0


@triton.jit
def returned_value_kernel(X, v):
    tl.store(X, plus_one(v))


@triton.jit(noinline=True)
def ordered(a, b):
    if a < b:
        return a, b, True
    return b, a, False


@triton.jit
def ordered_pair_kernel(X, Out):
    """Out = min, max (fp16) and whether they were in order: three values back from a device function."""
    lo, hi, was = ordered(tl.load(X), tl.load(X + 1))
    tl.store(Out, lo)
    tl.store(Out + 1, hi)
    tl.store(Out + 2, was.to(tl.float16))


@triton.jit(noinline=True)
def ramp(v, N: tl.constexpr):
    return tl.arange(0, N) * v


@triton.jit
def returned_block_kernel(X, v, N: tl.constexpr):
    tl.store(X + tl.arange(0, N), ramp(v, N))


@triton.jit(noinline=True)
def row_sum_into(X, Out, row, C: tl.constexpr):
    tl.store(Out + row, tl.sum(tl.load(X + row * C + tl.arange(0, C)), axis=0))


@triton.jit
def row_sums_kernel(X, Out, n_rows, R: tl.constexpr, C: tl.constexpr):
    """Out[r] = sum of row r through a device function; Out[n_rows] = the sum of everything."""
    total = tl.sum(tl.sum(tl.load(X + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]), axis=1), axis=0)
    for r in range(0, n_rows):
        row_sum_into(X, Out, r, C)
    tl.store(Out + n_rows, total)


def line_of(tag: str) -> int:
    return tagged_line(__file__, tag)
