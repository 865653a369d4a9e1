"""Numbers assigned to variables, which Triton holds as scalar tensors.

In Triton, `x = 10` in a kernel makes `x` a scalar tensor (`x.type` is int32, not
`constexpr_type[10]`); only `x: tl.constexpr = 10` keeps a compile-time constant. blocktune keeps
the value known at compile time in both cases (so that it may still size a block, a superset of
Triton), but marks the assigned one, so that what Triton answers about it (`x.type`, passed on to
called @jit functions too) is the same. Arithmetic on a marked number gives a plain one.
"""
from __future__ import annotations


class LiftedInt(int):
    """An int assigned to a variable (Triton: an int32/int64/... scalar tensor)."""

    def __reduce__(self):
        return (LiftedInt, (int(self),))


class LiftedFloat(float):
    """A float assigned to a variable (Triton: an fp32 scalar tensor)."""

    def __reduce__(self):
        return (LiftedFloat, (float(self),))


def lift(value):
    """`value` as a plain assignment stores it (tuples element by element, as Triton's)."""
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(lift(v) for v in value)
    if type(value) is int:
        return LiftedInt(value)
    if type(value) is float:
        return LiftedFloat(value)
    return value      # bool cannot be subclassed: it stays a compile-time bool (Triton: an int1 tensor)


def unlift(value):
    """`value` as a `tl.constexpr` annotated assignment stores it: a compile-time constant."""
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(unlift(v) for v in value)
    if isinstance(value, LiftedInt):
        return int(value)
    if isinstance(value, LiftedFloat):
        return float(value)
    return value


def is_lifted(value) -> bool:
    return isinstance(value, (LiftedInt, LiftedFloat))
