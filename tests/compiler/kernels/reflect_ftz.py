"""Kernels for the enable_reflect_ftz launch option: exp2 (an approximate PTX instruction) and sin
(libdevice) of values whose results are denormal."""
import compiler as triton
import compiler.language as tl


@triton.jit
def exp2_kernel(X, Y, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.math.exp2(tl.load(X + offs)))


@triton.jit
def sin_kernel(X, Y, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.sin(tl.load(X + offs)))
