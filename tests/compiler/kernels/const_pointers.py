"""Kernels with `tl.const` pointer parameters (read-only data, as Triton's annotation)."""
import compiler as triton
import compiler.language as tl


@triton.jit
def scale_kernel(X: tl.const, Out, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Out + offs, tl.load(X + offs, mask=mask) * scale, mask=mask)


@triton.jit
def pick(a, b, choose_b):
    if choose_b:
        return b
    else:
        return a


@triton.jit
def store_through_const_kernel(X: tl.const, Out):
    tl.store(X, tl.load(Out))


@triton.jit
def atomic_through_const_kernel(X: tl.const):
    tl.atomic_add(X + tl.arange(0, 4), 1.0)


@triton.jit
def runtime_if_mixes_kernel(X: tl.const, Out, choose):
    if choose:
        p = X
    else:
        p = Out
    tl.store(Out, tl.load(p))


@triton.jit
def runtime_call_mixes_kernel(X: tl.const, Out, choose):
    tl.store(Out, tl.load(pick(Out, X, choose)))


@triton.jit
def runtime_ternary_mixes_kernel(X: tl.const, Out, choose):
    tl.store(Out, tl.load(X if choose else Out))


@triton.jit
def constexpr_choice_kernel(X: tl.const, Out, CHOOSE_X: tl.constexpr):
    # a compile-time choice picks one pointer: no mixing, and the plain one may be stored to
    p = X if CHOOSE_X else Out
    tl.store(Out, tl.load(p) + 1)
