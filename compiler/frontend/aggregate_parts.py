"""An aggregate instance (`tl.core._aggregate`) seen as its runtime parts, so that loops carry it.

Aggregates are mutable Python objects: a method may change a field (`value.modify(x)`, a @jit
method's `self.a = a`), so a loop that uses one carries its runtime fields as plain IR values and
hands the body, and the code after the loop, a fresh copy holding the loop's values (as Triton's
loops carry an aggregate's flattened IR values). Compile-time fields must stay what they were.
"""
from __future__ import annotations

from ..language import core as tl_core
from .semantic import is_value


def has_runtime_parts(obj) -> bool:
    """Whether `obj` is an aggregate holding at least one runtime (IR) value."""
    return tl_core.is_aggregate(obj) and bool(AggregateParts(obj).parts())


class AggregateParts:
    """`parts()`, `structure()` and `with_parts()` of an aggregate, as block pointers have them."""

    def __init__(self, inst):
        self.inst = inst

    def _fields(self):
        return sorted(vars(self.inst).items())

    def parts(self) -> list:
        out = []
        for _, v in self._fields():
            if is_value(v):
                out.append(v)
            elif tl_core.is_aggregate(v):
                out.extend(AggregateParts(v).parts())
        return out

    def structure(self) -> tuple:
        shape = []
        for name, v in self._fields():
            if is_value(v):
                shape.append((name, "value"))
            elif tl_core.is_aggregate(v):
                shape.append((name, AggregateParts(v).structure()))
            else:
                shape.append((name, "static", id(v) if _unhashable(v) else v))
        return (type(self.inst), tuple(shape))

    def with_parts(self, parts: list):
        parts = list(parts)
        copy = object.__new__(type(self.inst))
        for name, v in self._fields():
            if is_value(v):
                v = parts.pop(0)
            elif tl_core.is_aggregate(v):
                sub = AggregateParts(v)
                k = len(sub.parts())
                v, parts = sub.with_parts(parts[:k]), parts[k:]
            object.__setattr__(copy, name, v)
        return copy

    def __repr__(self) -> str:
        return f"{type(self.inst).__name__} aggregate"


def _unhashable(v) -> bool:
    try:
        hash(v)
    except TypeError:
        return True
    return False
