"""Front end: a `@jit` function's syntax tree + its specialization → block IR (`ir.Function`)."""
from __future__ import annotations

from .. import ir
from ..errors import CompilationError
from ..language.core import constexpr
from ..language.dtypes import dtype, from_signature, int8, int64, pointer_type
from .. import tensor_map
from ..language import descriptor_type as DT
from .block_pointers import TensorDescriptor
from .codegen import CodeGenerator
from .fold_dot import fold_dot_accumulate
from .semantic import Builder, SemanticError, const, literal_type
from . import tuple_args


def generate_ir(kernel, signature: dict, constexprs: dict, arg_attrs: dict | None = None,
                tma_target: str | None = None, num_warps: int | None = None, gpu_target: str | None = None,
                device_functions: bool | dict = False, returns: bool = False) -> ir.Function:
    """Build the IR of `kernel` specialized on `signature` (runtime argument name → type, in any
    order) and `constexprs` (name → compile-time value; includes integers specialized to 1).

    `tma_target`: the GPU target when descriptors may go through TMA there (tensor_map.py); each
    such host descriptor `d` then also takes its CUtensorMap, parameter `d.tmap`, and a kernel
    that makes descriptors takes the global scratch memory their maps are written to, last.

    `gpu_target`: the GPU the build is for (`sm_90`), None in interpret mode: what Triton's front
    end warns about on some GPUs only (fp8e4b15 dots on Hopper and later) reads it.

    `num_warps`: the launch's, which `tl.extra.cuda.num_warps()`/`num_threads()` read at compile
    time (None: not known, and a kernel that reads it is a compile error).

    `device_functions`: a GPU build, where calls of noinline @jit functions become `call` ops of
    device functions of their own (device_calls.py) instead of being inlined; a dict: the kernel's
    table of them, which a device function's own build shares. `returns`: the function may return
    values (a device function): its final `return` op carries them, their types in
    `fn.result_types` (a block among them: SemanticError).

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
    runtime, types, attrs, descriptors = [], [], [], {}
    for p in [n for q in params for n in signature if tuple_args.root(n) == q]:   # tuple leaves after their tuple
        t = signature[p]
        desc = DT.parse(t)
        if desc is not None:  # a host tensor descriptor: its parts are the parameters
            elt, block, padding, shape_div16 = desc
            rank = len(block)
            tma = tensor_map.eligible(block, elt.primitive_bitwidth // 8, tma_target)
            descriptors[p] = (len(runtime), block, padding, tma)
            runtime += DT.part_names(p, rank)
            types += DT.part_types(elt, rank)
            # Triton's TMA rules, checked at launch: a 16-byte aligned base, strides of 16 bytes
            stride_div = max(1, 16 // max(1, elt.primitive_bitwidth // 8))
            attrs += [{"divisibility": 16}] + [{"divisibility": 16 if d else 1} for d in shape_div16] \
                + [{"divisibility": stride_div}] * (rank - 1) + [{"divisibility": 1}]
            if tma:
                runtime.append(DT.tensor_map_name(p))
                types.append(pointer_type(int8))
                attrs.append({"divisibility": 1, "tensor_map": True})
            continue
        runtime.append(p)
        types.append(t if isinstance(t, dtype) else from_signature(str(t)))
        attrs.append(dict({"divisibility": 1}, **arg_attrs.get(p, {})))
    body = ir.Block(types, runtime)
    fn = ir.Function(kernel.__name__, runtime, types, body, attrs, dict(constexprs), _def_loc(kernel))
    local = {p: a for p, a in zip(runtime, body.args)}
    for k, v in constexprs.items():
        local[k] = v.value if isinstance(v, constexpr) else v
    b = Builder()
    b.block = body
    b.loc = fn.loc
    b.tma_target = tma_target
    b.gpu_target = gpu_target
    b.num_warps = num_warps
    b.device_functions = device_functions if isinstance(device_functions, dict) else {} if device_functions else None
    b.generate_ir = generate_ir
    b.function_body = body
    b.arg_divisibility = {a.id: at.get("divisibility", 1) for a, at in zip(body.args, attrs)}
    for p, (first, block, padding, tma) in descriptors.items():
        rank = len(block)
        parts = body.args[first:first + 1 + 2 * rank + tma]
        # the last stride is 1 (checked at launch): a constant, so the last dim is known contiguous
        strides = list(parts[1 + rank:1 + 2 * rank - 1]) + [const(b, 1, int64)]
        local[p] = TensorDescriptor(parts[0], parts[1:1 + rank], strides, block, padding,
                                    tmap=parts[-1] if tma else None)
    for p in params:   # tuples: runtime leaves in place, constexpr wrappers removed (also when all are constexprs)
        if isinstance(local.get(p), tuple):
            local[p] = tuple_args.fill(local[p], local.__getitem__)
    gen = CodeGenerator(kernel, b, local, depth=1 if returns else 0)
    try:
        gen.visit_stmts(kernel.fn_ast.body)
    except SemanticError as exc:  # raised outside any node: attach the def line
        raise CompilationError(exc.described(), _def_loc(kernel), _def_line(kernel)) from None
    except RecursionError:        # the visitor names the node when it has room to; else the def line
        raise CompilationError("the kernel nests too deeply (nested expressions, blocks and @jit calls add up); "
                               "simplify it", _def_loc(kernel), _def_line(kernel)) from None
    body.ops.append(ir.Op("return", _returned_values(b, gen.returned_value()) if returns else [], [], loc=b.loc))
    fn.result_types = [v.type for v in body.ops[-1].operands]
    fold_dot_accumulate(fn)
    fn.dropped_ops = ir.eliminate_dead_code(fn)
    fn.gpu_refusals = b.gpu_refusals
    fn.device_functions = b.device_functions if b.device_functions is not None else {}
    if b.global_scratch is not None:   # device-side descriptors' tensor maps live there
        if any(op.name == "make_tensor_map" for op in fn.walk()):
            fn.arg_names.append(DT.GLOBAL_SCRATCH)
            fn.arg_types.append(b.global_scratch.type)
            fn.arg_attrs.append({"divisibility": 16})
        else:   # no descriptor it made is loaded or stored through TMA
            body.args.remove(b.global_scratch)
    return fn


def _returned_values(b: Builder, returned) -> list:
    """What a device function returns (None: nothing), as scalar values, numbers made constants."""
    if returned is None:
        return []
    out = []
    for v in (returned if isinstance(returned, tuple) else (returned,)):
        if isinstance(v, (bool, int, float)):
            v = const(b, v, literal_type(v))
        if not isinstance(v, ir.Value) or v.is_block:
            raise SemanticError("a device function returns scalars only")
        out.append(v)
    return out


def _def_loc(kernel) -> ir.Loc:
    node = kernel.fn_ast
    return ir.Loc(kernel.filename, node.lineno, node.col_offset + getattr(kernel, "col_offset_shift", 0), kernel.__name__)


def _def_line(kernel) -> str | None:
    lines = (kernel.src or "").splitlines()
    idx = kernel.fn_ast.lineno - kernel.first_lineno
    return lines[idx] if 0 <= idx < len(lines) else None


__all__ = ["generate_ir", "CompilationError"]
