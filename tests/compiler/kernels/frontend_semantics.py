"""Kernels for the front-end semantics tests (early returns, conditional expressions with effects,
compile-time Python on kernel values, tl.topk), run in interpret mode, through ptxas and on the GPU."""
from __future__ import annotations

import compiler as triton
import compiler.language as tl
from compiler.language.extra import libdevice


@triton.jit
def nested_return_kernel(Cond1, Cond2, Cond3, Val1, Val2, Val3, Out):
    """A `return` in one arm of a nested runtime `if`: the store after the `if` runs on every other path."""
    val = 0
    if tl.load(Cond1):
        if tl.load(Cond2):
            val = tl.load(Val1)
        else:
            return
    else:
        if tl.load(Cond3):
            val = tl.load(Val2)
        else:
            val = tl.load(Val3)
    tl.store(Out, val)


@triton.jit
def return_under_static_if_kernel(ExitEarly, Out, DYNAMIC: tl.constexpr):
    """A runtime `if` that returns, inside a compile-time `if`: what follows the outer `if` still runs."""
    if DYNAMIC:
        if tl.load(ExitEarly):
            tl.store(Out, 0)
            return
    tl.store(Out, 1)


@triton.jit
def _clamp_or_return(x, lo):
    if x < lo:
        if lo > 0:
            return lo
        return lo + 1
    return x


@triton.jit
def callee_returns_kernel(X, Out, N: tl.constexpr):
    """A @jit function whose returns sit at different depths of runtime ifs."""
    for i in tl.static_range(N):
        tl.store(Out + i, _clamp_or_return(tl.load(X + i), 5))


@triton.jit
def ifexp_effects_kernel(Flag, X, Out, Count, N: tl.constexpr):
    """Conditional expressions whose sides store, load and add atomically: only the chosen side runs."""
    offs = tl.arange(0, N)
    flag = tl.load(Flag)
    tl.store(Out + offs, tl.load(X + offs)) if flag != 0 else tl.store(Out + N + offs, tl.load(X + offs))
    # the pointer of the side not taken is None-safe only if that side never loads
    got = tl.load(X + N) if flag != 0 else -1.0
    tl.store(Out + 2 * N, got)
    tl.atomic_add(Count, 1) if flag != 0 else tl.atomic_add(Count + 1, 1)


@triton.jit
def static_range_kwargs_kernel(Z, N: tl.constexpr, STEP: tl.constexpr):
    acc = 0
    for i in tl.static_range(0, N, step=STEP):
        acc += i
    for j in tl.range(0, N, step=STEP, num_stages=2):
        acc += j
    tl.store(Z, acc)


@triton.jit
def hasattr_kernel(x, Out):
    """Python's `hasattr`/`isinstance` decided at compile time, short-circuiting the runtime test."""
    if (x is not None) and hasattr(x, "dtype") and isinstance(x.dtype, tl.pointer_type) and \
            (x.dtype.element_ty == tl.int32) and (tl.load(x) > 42):
        tl.store(x, 42)
    tl.store(Out, hasattr(x, "dtype"))


@triton.jit
def literal_dtype_kernel(Out, BLOCK: tl.constexpr):
    value = 1
    tl.store(Out + tl.arange(0, BLOCK), tl.full([BLOCK], value=value, dtype=value.dtype))


@triton.jit
def uint_with_literal_kernel(X, Out, N: tl.constexpr):
    """A Python int meeting a uint8 block keeps uint8 (Triton's kinds: bool < integer < float)."""
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    tl.store(Out + offs, (x + 200) // 3)


@triton.jit
def topk_kernel(X, Z, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    offs_m = tl.arange(0, M)
    x = tl.load(X + offs_m[:, None] * N + tl.arange(0, N)[None, :])
    z = tl.topk(x, K)
    tl.store(Z + offs_m[:, None] * K + tl.arange(0, K)[None, :], z)


@triton.jit
def where_pointers_kernel(Cond, A, B, Out, N: tl.constexpr):
    """Integers cast to `tl.pi32_t` (Triton's int32-pointer type), selected, stored back as integers."""
    offs = tl.arange(0, N)
    a = tl.load(A + offs).to(tl.pi32_t)
    b = tl.load(B + offs).to(tl.pi32_t)
    tl.store(Out + offs, tl.where(tl.load(Cond + offs), a, b))


@triton.jit
def getattr_kernel(X, Out, FN: tl.constexpr, N: tl.constexpr):
    """`getattr(module, name)` with the name a constexpr string (Triton's test_bessel picks a
    libdevice function so); a missing name with a default gives the default."""
    offs = tl.arange(0, N)
    x = tl.load(X + offs)
    fallback = getattr(libdevice, "no_such_function", None)
    if fallback is None:
        x = getattr(libdevice, FN)(x)
    tl.store(Out + offs, x)


@triton.jit
def number_method_kernel(Out, START: tl.constexpr, N: tl.constexpr):
    """A number assigned to a variable is Triton's scalar tensor: `acc = 0; acc.to(tl.int64)`."""
    acc = 0
    acc = acc.to(tl.int64)
    for i in range(START, START + N):
        acc += i
    tl.store(Out, acc)


@triton.jit
def constexpr_tuple_kernel(Out, SHAPE):
    """A tuple argument of tl.constexpr values (Triton's tests pass block shapes so): its items are
    plain numbers in the kernel."""
    n = 1
    for k in tl.static_range(len(SHAPE)):
        n *= SHAPE[k]
    tl.store(Out, n)


@triton.jit
def nested_hints_kernel(Dst, Src, Off, N, BLOCK: tl.constexpr, HINT: tl.constexpr):
    """Hints as a statement, nested, on offsets the compiler cannot see through (a loaded shift):
    Triton's test_vectorization_hints."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offsets = offsets + tl.load(Off)
    if HINT:
        tl.max_contiguous(tl.multiple_of(offsets, 1024), 1024)
    x = tl.load(Src + offsets, mask=offsets < N)
    tl.store(Dst + offsets, x, mask=offsets < N)


@tl.core._aggregate
class Pair:
    """Triton's aggregate: two kernel values and a compile-time scale, with @jit and Python methods."""
    first: tl.tensor
    second: tl.tensor
    scale: tl.constexpr

    def __init__(self, first, second, scale):
        self.first = first
        self.second = second
        self.scale = tl.constexpr(scale)

    @triton.jit
    def combined(self):
        return self.first * self.scale + self.second

    def swapped_parts(self, _semantic=None):
        return self.second, self.first

    @triton.jit
    def __getitem__(self, i: tl.constexpr):
        if i == 0:
            return self.first
        return self.second


@triton.jit
def _pair_of(x, y):
    return Pair(x, y, 3)


@triton.jit
def _sum_of(pair):
    return pair[0] + pair[1]


@triton.constexpr_function
def _twice(n):
    return 2 * n


@triton.jit
def aggregate_kernel(X, Y, Out, N: tl.constexpr):
    """Built by a @jit helper, passed to another, methods of both kinds, indexing; a
    constexpr_function sizes a block."""
    offs = tl.arange(0, N)
    pair = _pair_of(tl.load(X + offs), tl.load(Y + offs))
    b, a = pair.swapped_parts()
    tl.store(Out + offs, pair.combined())                       # 3x + y
    tl.store(Out + N + offs, _sum_of(pair) - a - b)             # (x + y) - x - y
    wide = tl.arange(0, _twice(N))
    tl.store(Out + 2 * N + wide, wide)


@triton.jit
def constexpr_type_kernel(Out, strides, N: tl.constexpr):
    """`.type` of compile-time values is Triton's tl.constexpr_type (a stride of 1 is specialized)."""
    tl.static_assert(isinstance(strides[1].type, tl.constexpr_type))
    tl.static_assert(N.type == tl.constexpr_type(8))
    tl.static_assert((1, 2).type == tl.constexpr_type((1, 2)))
    tl.store(Out + tl.arange(0, N), strides[0])


@triton.jit
def annotated_scalars_kernel(Out, half: tl.float16, small: "tl.uint8", N: tl.constexpr):
    """Scalar parameters annotated with a dtype have it (Triton's test_float/int_annotation)."""
    tl.static_assert(half.dtype == tl.float16)
    tl.static_assert(small.dtype == tl.uint8)
    offs = tl.arange(0, N)
    tl.store(Out + offs, half.to(tl.float32) + small + offs)
