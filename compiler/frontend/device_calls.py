"""Calls of `@jit(noinline=True)` functions as calls of device functions of their own (GPU builds).

Triton compiles a noinline function as a function of its own (a `.func` in the PTX, reached with
`call`), specialized on its arguments' types and compile-time values, so its code and line info
stay its own: a profiler (and Triton's test_line_info[call_noinline]) sees the call's line in the
caller and the callee's lines in the callee. blocktune does the same where the call passes scalars
and compile-time values only (Triton refuses blocks: codegen._check_noinline_arguments) and the
function returns scalars (or nothing); other calls, a recursive call of a function being built,
and interpret mode inline the function (the same results).
"""
from __future__ import annotations

import hashlib

from .. import ir
from ..errors import CompilationError
from ..language.core import constexpr
from ..language.dtypes import dtype
from .semantic import SemanticError, is_value

_COMPILE_TIME = (bool, int, float, str, type(None), dtype, constexpr)


_BUILDING = object()   # a device function's table entry while its own body is built


def device_call(gen, node, callee, local: dict):
    """Emit a `call` of `callee`'s device function for this call (its arguments bound in `local`)
    and return (True, what it returns); (False, None) where the call is inlined instead."""
    b = gen.b
    if b.device_functions is None:
        return False, None
    signature, constexprs, operands = {}, {}, []
    for p in callee.arg_names:
        v = local[p]
        if is_value(v):
            if v.is_block or p in callee.constexpr_names:
                return False, None
            signature[p] = v.type
            operands.append(v)
        elif isinstance(v, _COMPILE_TIME):
            constexprs[p] = v.value if isinstance(v, constexpr) else v
        else:   # tuples, descriptors, aggregates, functions: the inlined call handles them
            return False, None
    key = repr((callee.__module__, callee.__qualname__, [(k, ir.type_text(t)) for k, t in signature.items()],
                sorted((k, repr(v)) for k, v in constexprs.items())))
    name = f"{callee.__name__}__{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    fn = b.device_functions.get(name)
    if fn is _BUILDING:
        return False, None
    if fn is None:
        b.device_functions[name] = _BUILDING
        try:
            fn = b.generate_ir(callee, signature, constexprs, tma_target=b.tma_target, num_warps=b.num_warps,
                               gpu_target=b.gpu_target, device_functions=b.device_functions, returns=True)
        except SemanticError:   # it returns a block: inlined
            fn = None
        except CompilationError as e:   # Triton's shape: the error at the call, the callee's as its cause
            del b.device_functions[name]
            raise gen.error(node, e.message, type(e), within=e) from e
        if fn is None or fn.gpu_refusals or fn.arg_names != list(signature) or \
                any(op.name == "make_tensor_map" for op in fn.walk()):
            del b.device_functions[name]   # the kernel's own refusals, global scratch: inlined
            return False, None
        fn.name = name
        b.device_functions[name] = fn
    results = b.create("call", operands, fn.result_types, {"callee": name}).results
    if not results:
        return True, None
    return True, results[0] if len(results) == 1 else tuple(results)
