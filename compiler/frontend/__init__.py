"""Front end: a `@jit` function's syntax tree + its specialization → block IR (`ir.Function`)."""
from __future__ import annotations

from .. import ir
from ..errors import CompilationError
from ..language.core import constexpr
from ..language.dtypes import dtype, from_signature
from .codegen import CodeGenerator
from .semantic import Builder, SemanticError
from . import tuple_args


def generate_ir(kernel, signature: dict, constexprs: dict, arg_attrs: dict | None = None) -> ir.Function:
    """Build the IR of `kernel` specialized on `signature` (runtime argument name → type, in any
    order) and `constexprs` (name → compile-time value; includes integers specialized to 1).

    `arg_attrs[name]` may carry {"divisibility": 16}. Every parameter of the kernel must appear in
    exactly one of `signature` and `constexprs`. A tuple parameter's value in `constexprs` is its
    skeleton (tuple_args.py), its runtime leaves `<param>.<i>...` in `signature` (or in
    `constexprs` when specialized to 1).
    """
    arg_attrs = arg_attrs or {}
    params = list(kernel.arg_names)
    for name in list(signature) + list(constexprs):
        if tuple_args.root(name) not in params:
            raise CompilationError(f"{kernel.__name__}() has no parameter named '{name}'",
                                   _def_loc(kernel), _def_line(kernel))
    missing = [p for p in params if p not in signature and p not in constexprs]
    if missing:
        raise CompilationError(f"no type or value given for parameter(s) {', '.join(missing)} of {kernel.__name__}()",
                               _def_loc(kernel), _def_line(kernel))
    for p in kernel.constexpr_names:
        if p in signature:
            raise CompilationError(f"parameter '{p}' of {kernel.__name__}() is a tl.constexpr: pass it a value, not a type",
                                   _def_loc(kernel), _def_line(kernel))
    runtime = [n for p in params for n in signature if tuple_args.root(n) == p]
    types = []
    for p in runtime:
        t = signature[p]
        if not isinstance(t, dtype):
            t = from_signature(str(t))
        types.append(t)
    body = ir.Block(types, runtime)
    fn = ir.Function(kernel.__name__, runtime, types, body,
                     [dict({"divisibility": 1}, **arg_attrs.get(p, {})) for p in runtime],
                     dict(constexprs), _def_loc(kernel))
    local = {p: a for p, a in zip(runtime, body.args)}
    for k, v in constexprs.items():
        local[k] = v.value if isinstance(v, constexpr) else v
    for p in params:
        if tuple_args.has_leaves(local.get(p)):
            local[p] = tuple_args.fill(local[p], local.__getitem__)
    b = Builder()
    b.block = body
    b.loc = fn.loc
    gen = CodeGenerator(kernel, b, local)
    try:
        gen.visit_stmts(kernel.fn_ast.body)
    except SemanticError as exc:  # raised outside any node: attach the def line
        raise CompilationError(str(exc), _def_loc(kernel), _def_line(kernel)) from None
    except RecursionError:        # the visitor names the node when it has room to; else the def line
        raise CompilationError("the kernel nests too deeply (nested expressions, blocks and @jit calls add up); "
                               "simplify it", _def_loc(kernel), _def_line(kernel)) from None
    body.ops.append(ir.Op("return", [], [], loc=b.loc))
    ir.eliminate_dead_code(fn)
    return fn


def _def_loc(kernel) -> ir.Loc:
    node = kernel.fn_ast
    return ir.Loc(kernel.filename, node.lineno, node.col_offset + getattr(kernel, "col_offset_shift", 0), kernel.__name__)


def _def_line(kernel) -> str | None:
    lines = (kernel.src or "").splitlines()
    idx = kernel.fn_ast.lineno - kernel.first_lineno
    return lines[idx] if 0 <= idx < len(lines) else None


__all__ = ["generate_ir", "CompilationError"]
