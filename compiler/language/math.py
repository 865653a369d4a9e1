"""`tl.math.*`: the same builtins as on `tl`, as Triton exposes them."""
from .core import (  # noqa: F401
    abs, ceil, cos, div_rn, erf, exp, exp2, fdiv, floor, fma, log, log2, rsqrt, sin, sqrt, sqrt_rn,
    umulhi,
)
