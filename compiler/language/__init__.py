"""`import compiler.language as tl` — the same names as `triton.language`."""
from . import dtypes, math  # noqa: F401  (tl.math.exp etc.)
from . import extra  # noqa: F401  (tl.extra.cuda.libdevice)
from .core import *  # noqa: F401,F403
from .core import PropagateNan, constexpr, range, static_range, tensor, tensor_descriptor  # noqa: F401
from .dtypes import (  # noqa: F401
    bfloat16, block_type, dtype, float8e4b8, float8e4b15, float8e4nv, float8e5, float8e5b16, float16, float32,
    float64, int1, int8, int16, int32, int64, pointer_type, uint8, uint16, uint32, uint64, void,
)


float8e4m3fn = float8e4nv
float8e5m2 = float8e5


def str_to_ty(name: str, c=None):
    """Triton's `tl.str_to_ty`: a signature type name (`"*fp32"`, `"i32"`, `"u1"`) as a type."""
    return dtypes.from_signature(name)


# random numbers (Philox), written in kernel Python: imported last, they use the names above
from . import random  # noqa: E402,F401  (tl.random.uint_to_uniform_float etc.)
from .random import (  # noqa: E402,F401
    pair_uniform_to_normal, philox, philox_impl, rand, rand4x, randint, randint4x, randn, randn4x,
    uint_to_uniform_float,
)
from . import standard  # noqa: E402,F401
from .standard import swizzle2d  # noqa: E402,F401
