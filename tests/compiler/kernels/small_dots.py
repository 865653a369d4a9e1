"""Kernel for test_small_dots.py: one tl.dot of row-major tiles, M or N under 16 allowed."""
from __future__ import annotations

import compiler as triton
import compiler.language as tl


@triton.jit
def small_dot_kernel(X, Y, Z, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
    """Z = X @ Y for one [BM, BK] x [BK, BN] tile (contiguous rows), Z in its own type."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    x = tl.load(X + rm[:, None] * BK + rk[None, :])
    y = tl.load(Y + rk[:, None] * BN + rn[None, :])
    z = tl.dot(x, y, input_precision=PREC, out_dtype=Z.dtype.element_ty)
    tl.store(Z + rm[:, None] * BN + rn[None, :], z)
