"""Which module-level names a kernel may read: Triton's rule.

A kernel's globals are read once, when it is compiled; a later change to a plain variable would
not be seen by the compiled kernel. So, as in Triton, a kernel reads only globals that are
constants by construction (`NAME = tl.constexpr(42)`; an annotation, `NAME: tl.constexpr = 42`,
leaves a plain int) and what Python code is made of: modules, @jit and constexpr functions, tl
builtins, dtypes, aggregate and NamedTuple classes. `TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1` lifts
the rule (Triton's escape hatch).
"""
from __future__ import annotations

import builtins
import types

from .. import knobs
from ..language.core import constexpr
from ..language.dtypes import block_type, dtype

_LANGUAGE_MODULES = ("compiler.language", "triton.language")


def global_problem(name: str, value) -> str | None:
    """Why a kernel may not read global `name` holding `value` (Triton's words), or None."""
    if _allowed(name, value) or knobs.compilation.allow_non_constexpr_globals:
        return None
    return (f"Cannot access global variable {name} from within @jit'ed function. Triton kernels can only access "
            "global variables that are instanstiated as constexpr (`x = triton.language.constexpr(42)`). Note that "
            "this is different from annotating a variable as constexpr (`x: triton.language.constexpr = 42`), "
            "which is not supported.  Alternatively, set the envvar TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1, but we "
            "do not promise to support this forever.")


def _allowed(name: str, value) -> bool:
    if isinstance(value, (constexpr, dtype, block_type, types.ModuleType)):
        return True
    if hasattr(builtins, name):           # Python's builtins (range, min, ...), as Triton's namespace
        return True
    if hasattr(value, "fn_ast") and hasattr(value, "constexpr_names"):     # a @jit function
        return True
    if any(getattr(value, marker, False) for marker in
           ("__blocktune_builtin__", "__blocktune_aggregate__", "__blocktune_host_helper__")):
        return True
    if str(getattr(value, "__module__", "") or "").startswith(_LANGUAGE_MODULES):
        return True
    return isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")   # a NamedTuple
