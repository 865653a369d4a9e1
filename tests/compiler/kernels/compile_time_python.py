"""Kernels whose Python runs at compile time: aggregates built by Python `__init__`s and static or
class methods that call tl builtins through `_semantic`, constexpr arithmetic in constexpr
functions, a user's `@tl.core.builtin`, and loops with Triton's loop options (disable_licm)."""
from __future__ import annotations

import compiler as triton
import compiler.language as tl


@tl.core._aggregate
class Ramp:
    """A block built by its Python __init__ (tl.arange through `_semantic`), replaced by `set`."""
    value: tl.tensor

    def __init__(self, BLOCK, _semantic=None):
        self.value = tl.arange(0, BLOCK, _semantic=_semantic)

    def set(self, value, _semantic=None):
        self.value = value


@tl.core._aggregate
class Scaled:
    """A tensor with a constexpr factor, made by a static or a class method."""
    a: tl.tensor
    factor: tl.constexpr

    def __init__(self, a, factor):
        self.a = a
        self.factor = factor

    @staticmethod
    def tripled(a):
        return Scaled(a, tl.constexpr(3))

    @classmethod
    def doubled(cls, a):
        return cls(a, tl.constexpr(2))

    @triton.jit
    def apply(self):
        return self.a * self.factor


@tl.core._aggregate
class Square:
    """constexpr fields and a constexpr_function method multiplying them (constexpr * constexpr)."""
    val: tl.constexpr
    val_squared: tl.constexpr

    def __init__(self, val):
        self.val = tl.constexpr(val)
        self.val_squared = tl.constexpr(self.square())

    @triton.constexpr_function
    def square(self):
        return self.val * self.val


@tl.core.builtin
def make_list(*args, _semantic=None):
    return list(args)


@tl.core.builtin
def ramp_from(start, BLOCK, _semantic=None):
    """A user's builtin that builds IR through the `_semantic` it is given."""
    return tl.arange(start, start + BLOCK, _semantic=_semantic)


@triton.constexpr_function
def second(items):
    return items[1]


@triton.jit
def aggregate_for_kernel(X, Out, n, BLOCK: tl.constexpr):
    r = Ramp(BLOCK)
    for i in range(n):
        r.set(r.value + tl.load(X + i))
    tl.store(Out + tl.arange(0, BLOCK), r.value)


@triton.jit
def aggregate_while_kernel(X, Out, n, BLOCK: tl.constexpr):
    r = Ramp(BLOCK)
    i = 0
    while i < n:
        r.set(r.value * 2 + tl.load(X + i))
        i += 1
    tl.store(Out + tl.arange(0, BLOCK), r.value)


@triton.jit
def aggregate_factories_kernel(X, Out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    tl.store(Out + offs, Scaled.tripled(x).apply())
    tl.store(Out + BLOCK + offs, Scaled.doubled(x).apply())


@triton.jit
def constexpr_values_kernel(Out):
    sq = Square(4)
    a: tl.constexpr = second(make_list(4, 8, 16))
    tl.store(Out, sq.val)
    tl.store(Out + 1, sq.val_squared)
    tl.store(Out + 2, sq.square())
    tl.store(Out + 3, a)
    tl.store(Out + 4 + tl.arange(0, 4), ramp_from(10, 4))


@triton.jit
def loop_options_kernel(X, Out, n, DISABLE_LICM: tl.constexpr):
    """The same sums with and without disable_licm: the loop invariant x0 * 3 is read in each."""
    x0 = tl.load(X)
    acc = 0.0
    for i in tl.range(0, n, disable_licm=DISABLE_LICM):
        acc += tl.load(X + i) + x0 * 3.0
    j = 0
    acc2 = 0.0
    while tl.condition(j < n, disable_licm=DISABLE_LICM):
        acc2 += tl.load(X + j) * x0
        j += 1
    tl.store(Out, acc)
    tl.store(Out + 1, acc2)


@triton.jit
def _nothing():
    pass


@triton.jit
def endless_while_kernel(Out):
    """The condition reads nothing the loop changes: it is an endless loop (compiled, never run)."""
    i = 0
    while i < 10:
        if i == 5:
            _nothing()
        else:
            _nothing()
    tl.store(Out, i)


@triton.jit
def launch_shape_kernel(Out):
    """Triton's tl.extra.cuda.num_threads()/num_warps(): the launch's, known at compile time."""
    num_threads: tl.constexpr = tl.extra.cuda.num_threads()
    tl.store(Out + tl.arange(0, num_threads), tl.extra.cuda.num_warps())


@tl.core._aggregate
class Pair:
    """A tuple field that a Python method replaces inside loops."""
    items: tl.tuple

    def __init__(self, a, b):
        self.items = tl.tuple((a, b))

    def push(self, first, _semantic=None):
        self.items = tl.tuple((first, self.items[0]))


@triton.jit
def aggregate_tuple_loop_kernel(X, Out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = Pair(tl.load(X + offs), tl.zeros((BLOCK,), tl.int32))
    for i in range(n):
        p.push(p.items[1] + i)
    tl.store(Out + offs, p.items[0])
    tl.store(Out + BLOCK + offs, p.items[1])


@triton.jit
def aggregate_if_kernel(Flag, Out, BLOCK: tl.constexpr, WHERE: tl.constexpr):
    """An aggregate changed in place by a method in one branch, both, or neither of a runtime if."""
    r = Ramp(BLOCK)
    kept = Ramp(BLOCK)
    if tl.load(Flag) > 0:
        if WHERE == "then" or WHERE == "both":
            r.set(r.value + 100)
    else:
        if WHERE == "else" or WHERE == "both":
            r.set(r.value * 3)
    tl.store(Out + tl.arange(0, BLOCK), r.value + kept.value)
