"""The source text of a @jit kernel as a module that `jit_from_source` accepts on its own.

    text = kernel_module_source(kernel)      # raises NotSelfContained(reason)

A kernel defined in a user's file reads names of that file: `tl`, `triton`, @jit helpers, literal
constants. The tuning service compiles submitted source in strict mode (triton imports, @jit
functions and literal constants only; nothing is executed), so the user's file cannot be sent as
it is, and should not be: it may hold anything. This module writes a new one holding only what the
kernel reaches: one import line per module alias it uses, one line per literal constant, and the
source of the kernel and of every @jit function it calls (each under a plain `@triton.jit(...)`
decorator carrying its options).

The result is checked before it is returned: parsed back with `jit_from_source`, the kernel must
have the same fingerprint as the original. That is what makes the service's tuned configs (stored
under the fingerprint of the submitted source) the ones this kernel's launches look up.
"""
from __future__ import annotations

import ast
import types
from typing import Any

from .. import language as tl
from ..errors import CompilationError
from ..language.core import constexpr
from .jit import JITFunction, _referenced_names, _unwrap_jit
from .source import jit_from_source, package

_LITERALS = (bool, int, float, str, type(None))
_PACKAGE_EXPORTS = ("jit", "cdiv", "next_power_of_2")   # what strict source may import from the package


class NotSelfContained(Exception):
    """The kernel reads something that cannot be written as strict submitted source."""


def _literal_text(v: Any) -> str | None:
    """Python literal text that evaluates back to `v` exactly, or None."""
    if not isinstance(v, _LITERALS):
        return None
    text = repr(v)
    try:
        back = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return text if type(back) is type(v) and back == v else None


def _jit_options(jf: JITFunction) -> str:
    opts = []
    if jf.do_not_specialize:
        opts.append(f"do_not_specialize={list(jf.do_not_specialize)!r}")
    if jf.do_not_specialize_on_alignment:
        opts.append(f"do_not_specialize_on_alignment={list(jf.do_not_specialize_on_alignment)!r}")
    if jf.noinline:
        opts.append("noinline=True")
    if jf.debug is not None:
        opts.append(f"debug={bool(jf.debug)!r}")
    return f"({', '.join(opts)})" if opts else ""


class _Writer:
    def __init__(self):
        self.compiler, self.tl = package(), tl
        self.bound: dict[str, Any] = {}          # module-level name → object
        self.lines: dict[str, str] = {}          # module-level name → its import/constant line
        self.functions: list[JITFunction] = []   # the kernel and its helpers, callees first

    def bind(self, name: str, obj: Any, line: str | None) -> None:
        if name in self.bound:
            same = self.bound[name] is obj or (isinstance(obj, _LITERALS) and self.bound[name] == obj
                                               and type(self.bound[name]) is type(obj))
            if not same:
                raise NotSelfContained(f"the name '{name}' means different things in the kernel and its helpers")
            return
        self.bound[name] = obj
        if line is not None:
            self.lines[name] = line

    def _import_line(self, name: str, obj: Any) -> str | None:
        compiler, tl = self.compiler, self.tl
        for mod, dotted in ((compiler, "compiler"), (tl, "compiler.language"), (tl.math, "compiler.language.math")):
            if obj is mod:
                return f"import {dotted} as {name}"
        for attr in _PACKAGE_EXPORTS:
            if getattr(compiler, attr) is obj:
                return f"from compiler import {attr} as {name}"
        for mod, dotted in ((tl, "compiler.language"), (tl.math, "compiler.language.math")):
            attr = name if getattr(mod, name, None) is obj else next(
                (a for a in dir(mod) if not a.startswith("_") and getattr(mod, a, None) is obj), None)
            if attr is not None and not attr.startswith("_"):
                return f"from {dotted} import {attr} as {name}"
        return None

    def visit(self, jf: JITFunction) -> None:
        if any(f is jf for f in self.functions):
            return
        self.bind(jf.__name__, jf, None)
        callees: list[JITFunction] = []
        for chain in _referenced_names(jf.fn_ast):
            root = chain[0]
            if root in jf.arg_names:
                continue
            try:
                obj = jf.globals[root]
            except KeyError:
                continue    # a builtin (range, min...) or a name the front end reports itself
            j = _unwrap_jit(obj)
            if j is not None:
                if j.__name__ != root:
                    raise NotSelfContained(f"{jf.__name__} calls the @jit function {j.__name__} under the name "
                                           f"'{root}'")
                if j is not obj:
                    raise NotSelfContained(f"{jf.__name__} calls '{root}', a @jit function wrapped in "
                                           "@autotune / @heuristics")
                callees.append(j)
                continue
            if isinstance(obj, constexpr):
                text = _literal_text(obj.value)
                if text is None:
                    raise NotSelfContained(f"the constant '{root}' read by {jf.__name__} is not a literal")
                self.bind(root, obj, f"{root} = compiler.language.constexpr({text})")
                continue
            if isinstance(obj, _LITERALS):
                text = _literal_text(obj)
                if text is None:
                    raise NotSelfContained(f"the constant '{root}' read by {jf.__name__} is not a literal")
                self.bind(root, obj, f"{root} = {text}")
                continue
            line = self._import_line(root, obj)
            if line is None:
                what = obj.__name__ if isinstance(obj, types.ModuleType) else type(obj).__name__
                raise NotSelfContained(f"{jf.__name__} reads the global '{root}' ({what}), which submitted source "
                                       "cannot define (only triton imports, @jit functions and literal constants)")
            self.bind(root, obj, line)
        for j in callees:
            self.visit(j)
        self.functions.append(jf)

    def text(self) -> str:
        out = ["# written by blocktune from a launched kernel: what it reads, nothing else", "import compiler"]
        lines = [line for name, line in self.lines.items() if name != "compiler"]
        out += [line for line in lines if line.startswith(("import ", "from "))]
        out += [line for line in lines if not line.startswith(("import ", "from "))]
        for jf in self.functions:
            out += ["", "", f"@compiler.jit{_jit_options(jf)}", jf.src.rstrip("\n")]
        return "\n".join(out) + "\n"


def kernel_module_source(kernel: JITFunction) -> str:
    """A strict, self-contained module defining `kernel` (see the module doc)."""
    w = _Writer()
    w.bind("compiler", w.compiler, None)   # the decorators below are `@compiler.jit`
    w.visit(kernel)
    text = w.text()
    try:
        back = jit_from_source(text, kernel.__name__)
    except CompilationError as exc:
        raise NotSelfContained(f"the kernel's source is not accepted as submitted source: {exc}") from None
    if back.fingerprint != kernel.fingerprint:
        raise NotSelfContained("the kernel written as a module of its own compiles to a different kernel "
                               "(fingerprint differs)")
    return text


__all__ = ["kernel_module_source", "NotSelfContained"]
