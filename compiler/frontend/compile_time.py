"""Python code that a kernel runs at compile time: an aggregate's Python `__init__` and methods,
its static/class methods, and builtins of the user's (`@tl.core.builtin` with a `_semantic`).

Triton hands such code its `_semantic`, through which the `tl` builtins it calls build IR. Here
that is `CompileTimeSemantic`: a builtin called with it lowers at the kernel's call site, as if the
kernel had called it there (`tl.arange(0, 4, _semantic=_semantic)` in an aggregate's `__init__`).
"""
from __future__ import annotations


class CompileTimeSemantic:
    """Triton's `_semantic` for Python code run at compile time from one call in a kernel."""

    def __init__(self, gen, node):
        self._gen = gen
        self._node = node

    def call(self, fn, args, kwargs):
        """A `tl` builtin (or any callable a kernel may call) called from that Python code."""
        return self._gen.call(self._node, fn, list(args), dict(kwargs))


class AggregatePythonFunction:
    """A static or class method of an aggregate class that is plain Python (`Agg.create(x)` in a
    kernel): called, it runs at compile time on the kernel's values, like the class's `__init__`."""

    def __init__(self, fn):
        self.fn = fn


def is_compiler_builtin(fn) -> bool:
    """Whether a `@builtin` is one of the compiler's own (lowered by the front end) rather than
    a user's Python `@tl.core.builtin`, which runs at compile time."""
    return (getattr(fn, "__module__", "") or "").startswith("compiler.")
