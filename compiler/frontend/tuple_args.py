"""Tuples as kernel arguments, with Triton's semantics.

A tuple argument (nested, of tensors, numbers, None and tl.constexpr values; torch.Size and
NamedTuples included) reaches the kernel as its leaves: each runtime leaf is a kernel parameter of
its own, named `<param>.<i>.<j>...` by its position, and specialized like any argument (pointer
alignment, integers equal to 1). None, tl.constexpr and @jit function leaves are compile-time values.

The tuple parameter's compile-time value is the tuple's *skeleton*: the tuple with each runtime leaf
replaced by a `Leaf` naming its parameter. The front end rebuilds the tuple from the skeleton and the
leaves' values (`fill`), so the kernel body sees the tuple as the caller passed it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..language.core import constexpr
from .codegen import _is_jit


@dataclass(frozen=True)
class Leaf:
    """Where a runtime leaf of a tuple argument goes: the name of its kernel parameter."""
    name: str

    def __repr__(self) -> str:
        return f"Leaf({self.name})"


def is_tuple_arg(value: Any) -> bool:
    return isinstance(value, tuple)


def root(name: str) -> str:
    """The kernel parameter a (flattened) signature name belongs to."""
    return name.split(".", 1)[0]


def flatten(name: str, value: tuple) -> tuple[tuple, list[tuple[str, Any]]]:
    """(skeleton, [(leaf parameter name, leaf value), ...]) of a tuple argument, leaves in order."""
    leaves: list[tuple[str, Any]] = []
    items = []
    for i, v in enumerate(value):
        path = f"{name}.{i}"
        if isinstance(v, tuple):
            sub, sub_leaves = flatten(path, v)
            items.append(sub)
            leaves += sub_leaves
        elif v is None or isinstance(v, constexpr) or _is_jit(v):
            items.append(v)
        else:
            items.append(Leaf(path))
            leaves.append((path, v))
    return _like(value, items), leaves


def has_leaves(value: Any) -> bool:
    """Whether a compile-time value is a skeleton with runtime leaves."""
    return isinstance(value, tuple) and any(isinstance(v, Leaf) or has_leaves(v) for v in value)


def fill(skeleton: tuple, value_of: Callable[[str], Any]) -> tuple:
    """The tuple the kernel sees: leaves replaced by their values, constexpr wrappers removed."""
    items = []
    for v in skeleton:
        if isinstance(v, Leaf):
            items.append(value_of(v.name))
        elif isinstance(v, tuple):
            items.append(fill(v, value_of))
        elif isinstance(v, constexpr):
            items.append(v.value)
        else:
            items.append(v)
    return _like(skeleton, items)


def _like(value: tuple, items: list) -> tuple:
    if hasattr(type(value), "_fields"):      # a NamedTuple keeps its type (and field names)
        return type(value)(*items)
    return tuple(items)                      # torch.Size and other tuple types: a plain tuple


__all__ = ["Leaf", "is_tuple_arg", "root", "flatten", "has_leaves", "fill"]
