"""Calls of `@jit(noinline=True)` functions as calls of device functions of their own (GPU builds).

Triton compiles a noinline function as a function of its own (a `.func` in the PTX, reached with
`call`), specialized on its arguments' types and compile-time values, so its code and line info
stay its own: a profiler (and Triton's test_line_info[call_noinline]) sees the call's line in the
caller and the callee's lines in the callee. blocktune does the same where the call passes scalars
and compile-time values only (Triton refuses blocks: codegen._check_noinline_arguments) and the
function returns nothing; other calls, and interpret mode, inline the function (the same results).
"""
from __future__ import annotations

import ast
import hashlib

from .. import ir
from ..errors import CompilationError
from ..language.core import constexpr
from ..language.dtypes import dtype
from .semantic import is_value

_COMPILE_TIME = (bool, int, float, str, type(None), dtype, constexpr)


def _returns_value(fn_ast) -> bool:
    return any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn_ast))


def device_call(gen, node, callee, local: dict) -> bool:
    """Emit a `call` of `callee`'s device function for this call (its arguments bound in `local`);
    False (nothing emitted) where the call is inlined instead."""
    b = gen.b
    if b.device_functions is None or _returns_value(callee.fn_ast):
        return False
    signature, constexprs, operands = {}, {}, []
    for p in callee.arg_names:
        v = local[p]
        if is_value(v):
            if v.is_block or p in callee.constexpr_names:
                return False
            signature[p] = v.type
            operands.append(v)
        elif isinstance(v, _COMPILE_TIME):
            constexprs[p] = v.value if isinstance(v, constexpr) else v
        else:   # tuples, descriptors, aggregates, functions: the inlined call handles them
            return False
    key = repr((callee.__module__, callee.__qualname__, [(k, ir.type_text(t)) for k, t in signature.items()],
                sorted((k, repr(v)) for k, v in constexprs.items())))
    name = f"{callee.__name__}__{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    if name not in b.device_functions:
        from . import generate_ir  # noqa: PLC0415 - the front end's entry, which imports this module
        try:
            fn = generate_ir(callee, signature, constexprs, tma_target=b.tma_target, num_warps=b.num_warps,
                             device_functions=True)
        except CompilationError as e:   # Triton's shape: the error at the call, the callee's as its cause
            raise gen.error(node, e.message, type(e), within=e) from e
        if fn.gpu_refusals or fn.arg_names != list(signature) or \
                any(op.name == "make_tensor_map" for op in fn.walk()):
            return False   # the kernel's own refusals, global scratch: inlined
        fn.name = name
        b.device_functions[name] = fn
    b.create("call", operands, [], {"callee": name})
    return True
