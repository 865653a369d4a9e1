"""An aggregate instance (`tl.core._aggregate`) seen as its runtime parts, so that loops carry it.

Aggregates are mutable Python objects: a method may change a field (`value.modify(x)`, a @jit
method's `self.a = a`), so a loop that uses one carries its runtime fields as plain IR values and
hands the body, and the code after the loop, a fresh copy holding the loop's values (as Triton's
loops carry an aggregate's flattened IR values). Fields are walked into nested aggregates and
tuples; compile-time fields must stay what they were.
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

    def parts(self) -> list:
        out: list = []
        _collect(self.inst, out)
        return out

    def structure(self) -> tuple:
        return _shape(self.inst)

    def with_parts(self, parts: list):
        rest = list(parts)
        return _rebuild(self.inst, rest)

    def __repr__(self) -> str:
        return f"{type(self.inst).__name__} aggregate"


def _fields(inst):
    return sorted(vars(inst).items())


def _collect(v, out: list) -> None:
    if is_value(v):
        out.append(v)
    elif tl_core.is_aggregate(v):
        for _, f in _fields(v):
            _collect(f, out)
    elif isinstance(v, tuple):
        for x in v:
            _collect(x, out)


def _shape(v):
    if is_value(v):
        return "value"
    if tl_core.is_aggregate(v):
        return (type(v), tuple((name, _shape(f)) for name, f in _fields(v)))
    if isinstance(v, tuple):
        return (type(v), tuple(_shape(x) for x in v))
    try:
        hash(v)
    except TypeError:
        return ("static", id(v))
    return ("static", v)


def _rebuild(v, rest: list):
    """`v` with its runtime values taken, in order, from the front of `rest` (consumed)."""
    if is_value(v):
        return rest.pop(0)
    if tl_core.is_aggregate(v):
        copy = object.__new__(type(v))
        for name, f in _fields(v):
            object.__setattr__(copy, name, _rebuild(f, rest))
        return copy
    if isinstance(v, tuple):
        items = [_rebuild(x, rest) for x in v]
        return type(v)(*items) if hasattr(type(v), "_fields") else type(v)(items)
    return v
