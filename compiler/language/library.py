"""`@library`: tl functions written in kernel Python (like Triton's `@jit` helpers in
triton/language/random.py), parsed once and inlined by the front end at each call site.

The language layer cannot import the runtime's `@jit`, so this is the small part of it the front
end needs: the parsed function (`fn_ast`, `arg_names`, `constexpr_names`, `defaults`, `globals`,
where it lives). One implementation then serves interpret mode and the GPU alike.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

from .core import constexpr


class LibraryFunction:
    def __init__(self, fn):
        lines, start = inspect.getsourcelines(fn)
        src = textwrap.dedent("".join(lines))
        node = ast.parse(src).body[0]
        node.decorator_list = []
        ast.increment_lineno(node, start - 1)
        params = node.args.posonlyargs + node.args.args
        self.fn = fn
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__
        self.src = src
        self.fn_ast = node
        self.filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
        self.first_lineno = start
        self.col_offset_shift = 0
        self.globals = fn.__globals__
        self.arg_names = [p.arg for p in params]
        self.constexpr_names = [p.arg for p in params if _is_constexpr(p.annotation)]
        self.defaults = {}
        if fn.__defaults__:
            for name, v in zip(self.arg_names[len(self.arg_names) - len(fn.__defaults__):], fn.__defaults__):
                self.defaults[name] = v

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"tl.{self.__name__} can only be called inside a @jit kernel (it is compiled, "
                           "not run as Python); set BLOCKTUNE_INTERPRET=1 to run kernels on the CPU")

    def __repr__(self) -> str:
        return f"<tl library function {self.__module__}.{self.__name__}>"


def _is_constexpr(annotation) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return text == "constexpr" or text.endswith(".constexpr") or text == constexpr.__name__


def library(fn) -> LibraryFunction:
    """Mark a function of the tl library that is written in kernel Python."""
    return LibraryFunction(fn)
