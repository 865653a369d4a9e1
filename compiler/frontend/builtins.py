"""Lowering of `tl.*` builtins and tensor methods: one rule per name.

Each rule takes the code generator, the call's AST node, and the evaluated arguments (IR values or
compile-time Python values) exactly as the user wrote them, with Triton's signatures.
"""
from __future__ import annotations

import builtins

from .. import ir
from ..language import dtypes as T
from ..language.core import constexpr
from ..language.extra.cuda.libdevice import BOOLEAN_RESULT as LIBDEVICE_BOOLEAN, SIGNATURES as LIBDEVICE
from ..language.dtypes import block_type, dtype
from . import block_pointers as BP
from . import semantic as S
from ..errors import CompileTimeAssertionFailure
from .semantic import SemanticError, is_value

BUILTINS: dict = {}


def rule(*names):
    def register(fn):
        for n in names or (fn.__name__.rstrip("_"),):
            BUILTINS[n] = fn
        return fn
    return register


def _const(gen, node, v, what):
    if is_value(v):
        raise SemanticError(f"{what} must be a compile-time constant (tl.constexpr), got a runtime value of type {v.type}")
    return v.value if isinstance(v, constexpr) else v


def _shape(gen, node, shape, what="shape"):
    shape = _const(gen, node, shape, what)
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(_const(gen, node, s, what) for s in shape)
    for i, s in enumerate(shape):
        if not isinstance(s, int):
            raise SemanticError(f"Shape element {i} must have type `constexpr[int]`, got `constexpr[{type(s)}]`",
                                f"{what} {list(shape)}")
        if s <= 0 or s & (s - 1):
            raise SemanticError(f"Shape element {i} must be a power of 2", f"{what} {list(shape)}")
    return shape


def _axis(gen, node, axis):
    return None if axis is None else int(_const(gen, node, axis, "axis"))


# -- programs and index spaces --------------------------------------------------------------------
@rule("program_id")
def program_id(gen, node, axis=0):
    axis = _const(gen, node, axis, "tl.program_id's axis")
    if axis not in (0, 1, 2):
        raise SemanticError(f"program_id axis must be 0, 1, or 2 but got {axis}")
    return gen.b.value("program_id", [], T.int32, axis=axis)


@rule("num_programs")
def num_programs(gen, node, axis=0):
    axis = _const(gen, node, axis, "tl.num_programs's axis")
    if axis not in (0, 1, 2):
        raise SemanticError(f"num_programs axis must be 0, 1, or 2 but got {axis}")
    return gen.b.value("num_programs", [], T.int32, axis=axis)


@rule("arange")
def arange(gen, node, start, end):
    start, end = _const(gen, node, start, "tl.arange's start"), _const(gen, node, end, "tl.arange's end")
    n = end - start
    if n <= 0:
        raise SemanticError("arange's end argument must be greater than the start argument",
                            f"tl.arange({start}, {end})")
    if n & (n - 1):
        raise SemanticError("arange's range must be a power of 2", f"tl.arange({start}, {end}) has {n} elements")
    return gen.b.value("arange", [], block_type(T.int32, (n,)), start=start, end=end)


@rule("zeros")
def zeros(gen, node, shape, dtype):
    return S.const(gen.b, 0, block_type(_const(gen, node, dtype, "dtype"), _shape(gen, node, shape)))


@rule("zeros_like")
def zeros_like(gen, node, input):
    return S.const(gen.b, 0, input.type)


@rule("full")
def full(gen, node, shape, value, dtype):
    dt = _const(gen, node, dtype, "dtype")
    shape = _shape(gen, node, shape)
    if is_value(value):
        return S.splat(gen.b, S.cast(gen.b, value, dt), shape)
    return S.const(gen.b, value, block_type(dt, shape))


@rule("full_like")
def full_like(gen, node, input, value, dtype=None):
    return full(gen, node, input.shape, value, dtype or input.dtype)


@rule("cdiv")
def cdiv(gen, node, x, div):
    if not is_value(x) and not is_value(div):
        return -(-x // div)
    return S.floordiv(gen.b, S.sub(gen.b, S.add(gen.b, x, div), 1), div)


@rule("to_tensor")
def to_tensor(gen, node, x):
    return S.to_tensor(gen.b, x)


@rule("static_assert")
def static_assert(gen, node, cond, msg=""):
    if is_value(cond):
        raise SemanticError("tl.static_assert needs a compile-time condition")
    if not cond:
        raise gen.error(node, f"static assertion failed: {gen.text(node, msg)}", CompileTimeAssertionFailure)


def _tensor_text(v) -> str:
    """A block value as Triton's tensor prints at compile time: `int32[constexpr[128]]` (its shape's
    entries are constexprs), `fp32[]` for a scalar."""
    return f"{v.dtype}[{', '.join(f'constexpr[{n}]' for n in v.shape)}]"


@rule("static_print")
def static_print(gen, node, *values):
    print(*(gen.text(node, v) if not is_value(v) else _tensor_text(v) for v in values))


@rule("device_print")
def device_print(gen, node, prefix, *args, hex=False):
    gen.b.create("print", [S.to_tensor(gen.b, a) for a in args], [], {"prefix": gen.text(node, prefix), "hex": bool(hex)})


@rule("device_assert")
def device_assert(gen, node, cond, msg=""):
    if not is_value(cond):
        if not cond:
            raise SemanticError(f"device assertion failed at compile time: {gen.text(node, msg)}")
        return
    gen.b.create("assert", [S.to_bool(gen.b, cond)], [], {"message": gen.text(node, msg)})


@rule("assume")
def assume(gen, node, cond):
    """`tl.assume(pid >= 0)`: a promise to the optimizer; checked when it is known at compile time."""
    if not is_value(cond) and not cond:
        raise SemanticError("tl.assume of a condition that is false at compile time")


# -- shapes --------------------------------------------------------------------------------------
def _shape_args(gen, node, shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(_const(gen, node, s, "shape") for s in shape)


@rule("reshape")
def reshape(gen, node, input, *shape, can_reorder=False):
    return S.reshape(gen.b, S.to_tensor(gen.b, input), _shape_args(gen, node, shape), can_reorder)


@rule("view")
def view(gen, node, input, *shape):
    return S.reshape(gen.b, input, _shape_args(gen, node, shape), True)


@rule("ravel")
def ravel(gen, node, x, can_reorder=False):
    return S.reshape(gen.b, x, (x.type.numel,), bool(_const(gen, node, can_reorder, "can_reorder")))


@rule("trans", "permute")
def trans(gen, node, input, *dims):
    dims = _shape_args(gen, node, dims) if dims else None
    return S.trans(gen.b, input, dims)


@rule("expand_dims")
def expand_dims(gen, node, input, axis):
    axes = _const(gen, node, axis, "axis")
    axes = list(axes) if isinstance(axes, (tuple, list)) else [axes]
    out = S.to_tensor(gen.b, input)
    new_rank = len(out.shape) + len(axes)
    axes = [S.wrap_axis(a, new_rank) for a in axes]
    if len(set(axes)) != len(axes):
        raise SemanticError(f"expand_dims received duplicate axes, normalized axes = {axes}")
    for a in sorted(axes):
        out = S.expand_dims(gen.b, out, a)
    return out


@rule("broadcast_to")
def broadcast_to(gen, node, input, *shape):
    return S.broadcast_to(gen.b, S.to_tensor(gen.b, input), _shape_args(gen, node, shape))


@rule("broadcast")
def broadcast(gen, node, input, other):
    return S.broadcast_pair(gen.b, S.to_tensor(gen.b, input), S.to_tensor(gen.b, other))


@rule("join")
def join(gen, node, a, b):
    return S.join(gen.b, a, b)


@rule("split")
def split(gen, node, a):
    return S.split(gen.b, a)


@rule("interleave")
def interleave(gen, node, a, b):
    """Triton's definition: join, then merge the new dim into the last one."""
    c = S.join(gen.b, a, b)
    if len(c.shape) == 1:
        return c
    return S.reshape(gen.b, c, c.shape[:-2] + (2 * c.shape[-2],))


@rule("cat")
def cat(gen, node, input, other, can_reorder=False):
    """Triton's tl.cat: the elements of two 1-D blocks of one shape and type in one block of twice the
    length, in an order left to the compiler (Triton accepts only can_reorder=True too): here the
    two interleaved, a join and a free reshape, with no data movement between threads."""
    if not _const(gen, node, can_reorder, "can_reorder"):
        raise SemanticError("tl.cat may reorder elements and needs can_reorder=True (as in Triton); for an "
                            "ordered concatenation use tl.join and tl.permute, then tl.reshape")
    a, b = S.to_tensor(gen.b, input), S.to_tensor(gen.b, other)
    if len(a.shape) != 1 or a.shape != b.shape or a.dtype != b.dtype:
        raise SemanticError(f"tl.cat needs two 1-D blocks of one shape and type, got {a.type} and {b.type}")
    return S.reshape(gen.b, S.join(gen.b, a, b), (2 * a.shape[0],), True)


@rule("gather")
def gather(gen, node, src, index, axis):
    return S.gather(gen.b, src, index, _const(gen, node, axis, "tl.gather's axis"))


@rule("flip")
def flip(gen, node, x, dim=None):
    return S.flip(gen.b, x, _const(gen, node, dim, "tl.flip's dim"))


@rule("sort")
def sort(gen, node, x, dim=None, descending=False):
    return S.sort(gen.b, x, _const(gen, node, dim, "tl.sort's dim"), _const(gen, node, descending, "descending"))


@rule("item")
def item(gen, node, input):
    return S.unsplat(gen.b, input)


@rule("histogram")
def histogram(gen, node, input, num_bins, mask=None):
    return S.histogram(gen.b, input, _const(gen, node, num_bins, "tl.histogram's num_bins"), mask)


@rule("topk")
def topk(gen, node, x, k, dim=None):
    return S.topk(gen.b, x, _const(gen, node, k, "tl.topk's k"), _const(gen, node, dim, "tl.topk's dim"))


# -- elementwise ---------------------------------------------------------------------------------
@rule("where")
def where(gen, node, condition, x, y):
    if not is_value(condition):
        return x if condition else y
    return S.where(gen.b, condition, x, y)


def _minmax(which):
    def impl(gen, node, x, y, propagate_nan=None):
        if not is_value(x) and not is_value(y):
            return builtins.min(x, y) if which == "minimum" else builtins.max(x, y)
        return S.minmax(gen.b, which, x, y, _propagates_nan(propagate_nan))
    return impl


BUILTINS["maximum"] = _minmax("maximum")
BUILTINS["minimum"] = _minmax("minimum")


@rule("clamp")
def clamp(gen, node, x, min, max, propagate_nan=None):
    """Triton's clampf: min(max(x, lo), hi); with PropagateNan.ALL a NaN in x, lo or hi gives NaN,
    else NaN in x gives lo (maxnum/minnum)."""
    x = S.to_tensor(gen.b, x)
    if not x.dtype.is_floating():
        raise SemanticError(f"tl.clamp needs a floating-point value, got {x.dtype} (use tl.minimum/tl.maximum on integers)")
    nan = _propagates_nan(propagate_nan)
    lo = S.cast(gen.b, min, x.dtype) if not is_value(min) else min
    hi = S.cast(gen.b, max, x.dtype) if not is_value(max) else max
    return S.minmax(gen.b, "minimum", S.minmax(gen.b, "maximum", x, lo, nan), hi, nan)


def _propagates_nan(propagate_nan) -> bool:
    return propagate_nan is not None and str(getattr(propagate_nan, "name", propagate_nan)).upper().endswith("ALL")


def _math(name, **attrs):
    def impl(gen, node, x):
        return S.unary_math(gen.b, name, x, **attrs)
    return impl


for _n in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "tanh"):
    BUILTINS[_n] = _math(_n, fast=True)
for _n in ("floor", "ceil", "abs"):
    BUILTINS[_n] = _math(_n)
BUILTINS["sqrt_rn"] = _math("sqrt", fast=False)


@rule("sigmoid")
def sigmoid(gen, node, x):  # Triton's own definition: 1 / (1 + exp(-x))
    return S.truediv(gen.b, 1, S.add(gen.b, 1, S.unary_math(gen.b, "exp", S.neg(gen.b, x), fast=True)))


@rule("softmax")
def softmax(gen, node, x, ieee_rounding=False):
    z = S.sub(gen.b, x, S.reduce(gen.b, x, 0, "max", keep_dims=True))
    num = S.unary_math(gen.b, "exp", z, fast=True)
    den = S.reduce(gen.b, num, 0, "sum", keep_dims=True)
    return S.truediv(gen.b, num, den, ieee=bool(ieee_rounding))


@rule("fdiv")
def fdiv(gen, node, x, y, ieee_rounding=False):
    return S.truediv(gen.b, x, y, ieee=bool(ieee_rounding))


@rule("div_rn")
def div_rn(gen, node, x, y):
    return S.truediv(gen.b, x, y, ieee=True)


@rule("fma")
def fma(gen, node, x, y, z):
    return S.fma(gen.b, x, y, z)


@rule("umulhi")
def umulhi(gen, node, x, y):
    x, y = S.binary_operands(gen.b, x, y)
    if not x.dtype.is_int():
        raise SemanticError("tl.umulhi needs integers")
    return gen.b.value("umulhi", [x, y], x.type)


@rule("cast")
def cast(gen, node, input, dtype, fp_downcast_rounding=None, bitcast=False):
    return S.cast(gen.b, input, _const(gen, node, dtype, "dtype"), bitcast=bool(bitcast),
                  fp_downcast_rounding=_const(gen, node, fp_downcast_rounding, "fp_downcast_rounding"))


# -- libdevice, extern functions and inline assembly ----------------------------------------------
def extern_call(gen, what, args, signatures, boolean=False):
    """Triton's extern_elementwise: the symbol for the arguments' exact types, else for their common
    type; all arguments broadcast to one shape."""
    args = [S.to_tensor(gen.b, a) for a in args]
    key = tuple(a.dtype.sig_name for a in args)
    if key not in signatures and len(args) > 1:
        ty = args[0].dtype
        for a in args[1:]:
            ty = S.computation_type(ty, False, a.dtype, False, False)
        args = [S.cast(gen.b, a, ty) for a in args]
        key = tuple(a.dtype.sig_name for a in args)
    if key not in signatures:
        accepted = "; ".join("(" + ", ".join(k) + ")" for k in signatures)
        raise SemanticError(f"{what} takes arguments of types {accepted}, got ({', '.join(key)}); "
                            "cast them first, e.g. x.to(tl.float32)")
    shape = S.broadcast_shapes(*(a.shape for a in args))
    args = [S.broadcast_to(gen.b, a, shape) for a in args]
    symbol, result = signatures[key]
    out = gen.b.value("extern_elementwise", args, S._with_shape(T.from_signature(result), shape), symbol=symbol)
    return S.cast(gen.b, out, T.int1) if boolean else out


def _libdevice(name):
    def impl(gen, node, *args):
        return extern_call(gen, f"libdevice.{name}", args, LIBDEVICE[name], boolean=name in LIBDEVICE_BOOLEAN)
    return impl


for _n in LIBDEVICE:
    BUILTINS[f"libdevice.{_n}"] = _libdevice(_n)


def _signature_text(t) -> str:
    """A type given to tl.extern_elementwise as `tl.float32` or as its signature string "fp32"."""
    return T.to_signature(t) if isinstance(t, T.dtype) else str(t)


@rule("extern_elementwise")
def extern_elementwise(gen, node, lib_name, lib_path, args, arg_type_symbol_dict, is_pure=True):
    """`tl.extern_elementwise("", "", [x], {(tl.float32,): ("__nv_sinf", tl.float32)}, is_pure=True)`:
    libdevice symbols only (the NVPTX backend links libdevice; other libraries are not linked)."""
    signatures = {}
    for types, (symbol, result) in dict(arg_type_symbol_dict).items():
        if not str(symbol).startswith("__nv_"):
            raise SemanticError(f"tl.extern_elementwise: only libdevice functions (__nv_*) can be called, got {symbol!r}")
        signatures[tuple(T.from_signature(_signature_text(t)).sig_name for t in types)] = \
            (symbol, T.from_signature(_signature_text(result)).sig_name)
    return extern_call(gen, f"tl.extern_elementwise({lib_name!r})", list(args), signatures)


@rule("inline_asm_elementwise")
def inline_asm_elementwise(gen, node, asm, constraints, args, dtype, is_pure, pack):
    """PTX inline assembly applied elementwise; `pack` elements per asm instance (Triton's
    semantics). Runs on the GPU only: interpret mode refuses it (so does Triton's interpreter)."""
    asm = _const(gen, node, asm, "tl.inline_asm_elementwise's asm")
    constraints = _const(gen, node, constraints, "tl.inline_asm_elementwise's constraints")
    pack = _const(gen, node, pack, "tl.inline_asm_elementwise's pack")
    is_pure = _const(gen, node, is_pure, "tl.inline_asm_elementwise's is_pure")
    if not isinstance(asm, str) or not isinstance(constraints, str):
        raise SemanticError("tl.inline_asm_elementwise needs the asm and the constraints as strings")
    if not isinstance(pack, int) or pack < 1 or pack & (pack - 1):
        raise SemanticError(f"tl.inline_asm_elementwise's pack must be a power of two >= 1, got {pack!r}")
    dtypes = tuple(dtype) if isinstance(dtype, (tuple, list)) else (dtype,)
    for d in dtypes:
        if not isinstance(d, T.dtype) or d.is_ptr() or d.name == "void":
            raise SemanticError(f"tl.inline_asm_elementwise's dtype must be a scalar dtype or a tuple of them, got {d!r}")
    args = [S.to_tensor(gen.b, a) for a in args]
    shape = S.broadcast_shapes(*(a.shape for a in args)) if args else ()
    args = [S.broadcast_to(gen.b, a, shape) for a in args]
    n_out = constraints.count("=")
    want = sum(pack // ir.inline_asm_elements_per_register(d, pack) for d in dtypes)
    if n_out != want:
        raise SemanticError(f"tl.inline_asm_elementwise: the constraints name {n_out} outputs ('=…') but dtype "
                            f"{'and pack ' if pack > 1 else ''}give{'' if pack > 1 else 's'} {want} registers")
    op = gen.b.create("inline_asm", args, [S._with_shape(d, shape) for d in dtypes],
                      {"asm": asm, "constraints": constraints, "pure": bool(is_pure), "pack": pack})
    return tuple(op.results) if isinstance(dtype, (tuple, list)) else op.results[0]


@rule("smid")
def smid(gen, node):
    """tl.extra.cuda.smid(): %smid, as Triton reads it (inline asm; GPU only)."""
    return inline_asm_elementwise(gen, node, "mov.u32 $0, %smid;", "=r", [], T.int32, True, 1)


@rule("num_warps")
def num_warps(gen, node):
    """tl.extra.cuda.num_warps(): the launch's num_warps, a compile-time value (as Triton's)."""
    if gen.b.num_warps is None:
        raise gen.error(node, "tl.extra.cuda.num_warps() needs the launch's num_warps, which this compile does not have")
    return gen.b.num_warps


@rule("num_threads")
def num_threads(gen, node):
    """tl.extra.cuda.num_threads(): 32 * num_warps, a compile-time value (as Triton's)."""
    return 32 * num_warps(gen, node)


@rule("globaltimer")
def globaltimer(gen, node):
    """tl.extra.cuda.globaltimer(): %globaltimer in ns (inline asm, impure: each call reads it again)."""
    return inline_asm_elementwise(gen, node, "mov.u64 $0, %globaltimer;", "=l", [], T.int64, False, 1)


# -- reductions and scans --------------------------------------------------------------------
@rule("sum")
def sum_(gen, node, input, axis=None, keep_dims=False, dtype=None):
    return S.reduce(gen.b, input, _axis(gen, node, axis), "sum", bool(keep_dims), dtype)


@rule("xor_sum")
def xor_sum(gen, node, input, axis=None, keep_dims=False):
    return S.reduce(gen.b, input, _axis(gen, node, axis), "xor_sum", bool(keep_dims))


def _max_min(kind):
    def impl(gen, node, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
        axis = _axis(gen, node, axis)
        values = S.reduce(gen.b, input, axis, kind, bool(keep_dims))
        if return_indices:
            idx = S.reduce(gen.b, input, axis, "arg" + kind, bool(keep_dims), tie_break_left=return_indices_tie_break_left)
            return values, idx
        return values
    return impl


BUILTINS["max"] = _max_min("max")
BUILTINS["min"] = _max_min("min")


def _arg(kind):
    def impl(gen, node, input, axis, tie_break_left=True, keep_dims=False):
        return S.reduce(gen.b, input, _axis(gen, node, axis), kind, bool(keep_dims), tie_break_left=tie_break_left)
    return impl


BUILTINS["argmax"] = _arg("argmax")
BUILTINS["argmin"] = _arg("argmin")


def _scan_input(gen, node, input, dtype):
    """As Triton's cumsum/cumprod: bfloat16 accumulates (and returns) float32; `dtype` casts first."""
    x = S.to_tensor(gen.b, input)
    if x.dtype == T.bfloat16:
        x = S.cast(gen.b, x, T.float32)
    if dtype is not None:
        x = S.cast(gen.b, x, _const(gen, node, dtype, "dtype"))
    return x


@rule("cumsum")
def cumsum(gen, node, input, axis=0, reverse=False, dtype=None):
    return S.scan(gen.b, _scan_input(gen, node, input, dtype), _axis(gen, node, axis), "sum", bool(reverse))


@rule("cumprod")
def cumprod(gen, node, input, axis=0, reverse=False, dtype=None):
    return S.scan(gen.b, _scan_input(gen, node, input, dtype), _axis(gen, node, axis), "prod", bool(reverse))


def _combine_region(gen, node, combine_fn, dtypes) -> ir.Block:
    """The region of a custom reduction/scan: `combine_fn(*a, *b)` inlined on scalar arguments,
    its results cast to the inputs' types and yielded."""
    if not hasattr(combine_fn, "fn_ast"):
        raise SemanticError(f"combine_fn must be a @triton.jit function, got {gen._describe(combine_fn)}")
    region = ir.Block(list(dtypes) * 2)
    saved = gen.b.block
    gen.b.block = region
    try:
        out = gen.inline(node, combine_fn, list(region.args), {})
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != len(dtypes):
            raise SemanticError(f"combine_fn {combine_fn.__name__} returns {len(outs)} values for "
                                f"{len(dtypes)} inputs; it must return one value per input")
        ys = []
        for v, dt in zip(outs, dtypes):
            if v is None or (is_value(v) and v.is_block):
                raise SemanticError(f"combine_fn {combine_fn.__name__} must return scalars of the inputs' types")
            ys.append(S.cast(gen.b, v, dt))
        gen.b.create("yield", ys, [])
    finally:
        gen.b.block = saved
    return region


def _combine_inputs(gen, input, what):
    xs = tuple(input) if isinstance(input, (tuple, list)) else (input,)
    xs = tuple(S.to_tensor(gen.b, x) for x in xs)
    if not xs or any(not x.is_block for x in xs):
        raise SemanticError(f"{what} needs blocks, got {', '.join(S._describe(x) for x in xs) or 'nothing'}")
    if len({x.shape for x in xs}) != 1:
        raise SemanticError(f"{what}: every input must have the same shape, got {[list(x.shape) for x in xs]}")
    return xs


def _combine_axis(gen, node, axis, rank, what):
    axis = _axis(gen, node, axis)
    if not -rank <= axis < rank:
        raise SemanticError(f"{what}: axis {axis} out of range for a {rank}-D block")
    return axis % rank


@rule("reduce")
def reduce_(gen, node, input, axis, combine_fn, keep_dims=False):
    xs = _combine_inputs(gen, input, "tl.reduce")
    if axis is None:
        if keep_dims:   # over every axis, each kept with length 1 (as Triton)
            outs = reduce_(gen, node, tuple(xs), None, combine_fn)
            outs = tuple(S.reshape(gen.b, r, (1,) * len(xs[0].shape)) for r in outs)
            return outs if isinstance(input, (tuple, list)) else outs[0]
        xs = tuple(S.reshape(gen.b, x, (x.type.numel,)) for x in xs)
        axis = 0
    axis = _combine_axis(gen, node, axis, len(xs[0].shape), "tl.reduce")
    region = _combine_region(gen, node, combine_fn, [x.dtype for x in xs])
    shape = xs[0].shape[:axis] + xs[0].shape[axis + 1:]
    op = gen.b.create("reduce_combine", list(xs), [S._with_shape(x.dtype, shape) for x in xs], {"axis": axis},
                      regions=[region])
    outs = tuple(S.expand_dims(gen.b, r, axis) if keep_dims else r for r in op.results)
    return outs if isinstance(input, (tuple, list)) else outs[0]


@rule("associative_scan")
def associative_scan(gen, node, input, axis, combine_fn, reverse=False):
    xs = _combine_inputs(gen, input, "tl.associative_scan")
    axis = _combine_axis(gen, node, axis, len(xs[0].shape), "tl.associative_scan")
    region = _combine_region(gen, node, combine_fn, [x.dtype for x in xs])
    op = gen.b.create("scan_combine", list(xs), [x.type for x in xs], {"axis": axis, "reverse": bool(reverse)},
                      regions=[region])
    return tuple(op.results) if isinstance(input, (tuple, list)) else op.result


@rule("map_elementwise")
def map_elementwise(gen, node, scalar_fn, *args, pack=1):
    """`scalar_fn` inlined on scalars and applied to every element of the broadcast `args` (Triton's
    tl.map_elementwise): control flow in it branches per element. With `pack` > 1 one call takes
    `pack` consecutive elements of each argument (a0, a1, b0, b1) and returns `pack` values per
    result (c0, c1, d0, d1)."""
    pack = _const(gen, node, pack, "tl.map_elementwise's pack")
    if not hasattr(scalar_fn, "fn_ast"):
        raise SemanticError(f"tl.map_elementwise needs a @triton.jit function, got {gen._describe(scalar_fn)}")
    if not isinstance(pack, int) or pack < 1:
        raise SemanticError(f"tl.map_elementwise's pack must be an integer >= 1, got {pack!r}")
    xs = [S.to_tensor(gen.b, a) for a in args]
    if not xs:
        raise SemanticError("tl.map_elementwise needs at least one tensor argument")
    shape = S.broadcast_shapes(*(x.shape for x in xs))
    if not shape:
        raise SemanticError("tl.map_elementwise maps over blocks; call the @jit function directly on scalars")
    xs = [S.broadcast_to(gen.b, x, shape) for x in xs]
    region = ir.Block([x.dtype for x in xs for _ in range(pack)])
    saved = gen.b.block
    gen.b.block = region
    try:
        out = gen.inline(node, scalar_fn, list(region.args), {})
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        outs = tuple(S.to_tensor(gen.b, v) if v is not None and not is_value(v) else v for v in outs)
        if not outs or any(v is None or v.is_block for v in outs):
            raise SemanticError(f"{scalar_fn.__name__} must return scalars (one or a tuple) for tl.map_elementwise")
        if len(outs) % pack:
            raise SemanticError(f"{scalar_fn.__name__} returns {len(outs)} values, not a multiple of pack={pack}")
        dtypes = [v.dtype for v in outs[::pack]]
        for j in range(1, pack):
            if [v.dtype for v in outs[j::pack]] != dtypes:
                raise SemanticError(f"{scalar_fn.__name__}: the {pack} packed values of each result must have one type, "
                                    f"got {[str(v.dtype) for v in outs]}")
        gen.b.create("yield", list(outs), [])
    finally:
        gen.b.block = saved
    op = gen.b.create("map_elementwise", xs, [S._with_shape(d, shape) for d in dtypes], {"pack": pack},
                      regions=[region])
    return op.results[0] if len(op.results) == 1 else tuple(op.results)


# -- memory ----------------------------------------------------------------------------------
@rule("load")
def load(gen, node, pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    if isinstance(pointer, BP.BlockPointer):
        return BP.load(gen.b, pointer, mask, other, boundary_check, padding_option, cache_modifier, eviction_policy, volatile)
    if boundary_check:
        raise SemanticError("boundary_check is only for block pointers (tl.make_block_ptr); use a mask")
    return S.load(gen.b, pointer, mask, other, cache_modifier, eviction_policy, volatile)


@rule("store")
def store(gen, node, pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    if isinstance(pointer, BP.BlockPointer):
        return BP.store(gen.b, pointer, value, mask, boundary_check, cache_modifier, eviction_policy)
    if boundary_check:
        raise SemanticError("boundary_check is only for block pointers (tl.make_block_ptr); use a mask")
    S.store(gen.b, pointer, value, mask, cache_modifier, eviction_policy)


@rule("make_block_ptr")
def make_block_ptr(gen, node, base, shape, strides, offsets, block_shape, order):
    return BP.make_block_ptr(gen.b, base, shape, strides, offsets, block_shape, order)


@rule("advance")
def advance(gen, node, base, offsets):
    return BP.advance(gen.b, base, offsets)


@rule("make_tensor_descriptor")
def make_tensor_descriptor(gen, node, base, shape, strides, block_shape, padding_option="zero"):
    return BP.make_tensor_descriptor(gen.b, base, shape, strides, block_shape, padding_option)


@rule("load_tensor_descriptor")
def load_tensor_descriptor(gen, node, desc, offsets):
    return _descriptor_load(gen, node, _descriptor(desc, "tl.load_tensor_descriptor"), offsets)


@rule("store_tensor_descriptor")
def store_tensor_descriptor(gen, node, desc, offsets, value):
    _descriptor_store(gen, node, _descriptor(desc, "tl.store_tensor_descriptor"), offsets, value)


def _descriptor(desc, what):
    if not isinstance(desc, BP.TensorDescriptor):
        raise SemanticError(f"{what} needs a tensor descriptor (tl.make_tensor_descriptor or a host TensorDescriptor), "
                            f"got {S._describe(desc)}")
    return desc


class DescriptorMethod:
    """`desc.load(offsets)` / `desc.store(offsets, value)` bound to a tensor descriptor."""

    def __init__(self, desc, name):
        self.desc, self.name = desc, name

    def __call__(self, gen, node, *args, **kwargs):
        if self.name == "load":
            return _descriptor_load(gen, node, self.desc, *args, **kwargs)
        if self.name == "store":
            return _descriptor_store(gen, node, self.desc, *args, **kwargs)
        if self.name == "gather":
            return _descriptor_gather(gen, node, self.desc, *args, **kwargs)
        if self.name == "scatter":
            return _descriptor_scatter(gen, node, self.desc, *args, **kwargs)
        return _descriptor_atomic(gen, node, self.desc, self.name, *args, **kwargs)


def _descriptor_load(gen, node, desc, offsets):
    return BP.descriptor_load(gen.b, desc, offsets)


def _descriptor_store(gen, node, desc, offsets, value):
    BP.descriptor_store(gen.b, desc, offsets, value)


def _descriptor_atomic(gen, node, desc, kind, offsets, value):
    BP.descriptor_atomic(gen.b, desc, kind, offsets, value)


def _descriptor_gather(gen, node, desc, *offsets):
    if len(offsets) != 2:
        raise SemanticError(f"descriptor gather takes (x_offsets, y_offset), got {len(offsets)} arguments")
    return BP.descriptor_gather(gen.b, desc, *offsets)


def _descriptor_scatter(gen, node, desc, value, *offsets):
    if len(offsets) != 2:
        raise SemanticError(f"descriptor scatter takes (value, x_offsets, y_offset), got {1 + len(offsets)} arguments")
    BP.descriptor_scatter(gen.b, desc, value, *offsets)


def composite_attribute(b, x, attr: str):
    """Attributes of a block pointer or tensor descriptor inside a kernel."""
    if isinstance(x, BP.TensorDescriptor):
        if attr in ("load", "store", "gather", "scatter") or attr in BP.DESCRIPTOR_ATOMICS:
            return DescriptorMethod(x, attr)
        if attr in ("block_shape", "dtype", "block_type"):
            return getattr(x, attr)
        if attr in ("shape", "strides"):
            return tuple(getattr(x, attr))
    elif attr in ("type", "dtype"):
        return getattr(x, attr)
    raise SemanticError(f"a {x!r} has no attribute '{attr}'")


def _atomic(kind):
    def impl(gen, node, pointer, val, mask=None, sem=None, scope=None):
        return S.atomic_rmw(gen.b, kind, pointer, val, mask, sem, scope)
    return impl


for _k in ("add", "max", "min", "xchg", "and", "or", "xor"):
    BUILTINS[f"atomic_{_k}"] = _atomic(_k)


@rule("atomic_cas")
def atomic_cas(gen, node, pointer, cmp, val, sem=None, scope=None):
    return S.atomic_cas(gen.b, pointer, cmp, val, sem, scope)


@rule("debug_barrier")
def debug_barrier(gen, node):
    gen.b.create("barrier", [], [])


def _hint(which):
    def impl(gen, node, input, values):
        values = _const(gen, node, values, which)
        values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
        if not is_value(input):
            return input
        attrs = {"multiple_of": None, "max_contiguous": None, "max_constancy": None}
        attrs[which] = tuple(int(v) for v in values)
        return gen.b.value("assume", [input], input.type, **attrs)
    return impl


BUILTINS["multiple_of"] = _hint("multiple_of")
BUILTINS["max_contiguous"] = _hint("max_contiguous")
BUILTINS["max_constancy"] = _hint("max_constancy")


# -- matrix ----------------------------------------------------------------------------------
@rule("dot")
def dot(gen, node, input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=T.float32):
    return S.dot(gen.b, input, other, acc, input_precision, allow_tf32, max_num_imprecise_acc, out_dtype)


@rule("dot_scaled")
def dot_scaled(gen, node, lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None, fast_math=False,
               lhs_k_pack=True, rhs_k_pack=True, out_dtype=None):
    """Triton's tl.dot_scaled (microscaled formats), emulated as Triton does on sm_90 (dot_scaled.py)."""
    from . import dot_scaled as DS  # noqa: PLC0415 - one rule's helpers
    fmts = [_const(gen, node, f, "tl.dot_scaled's format") for f in (lhs_format, rhs_format)]
    packs = [_const(gen, node, p, "tl.dot_scaled's k_pack") for p in (lhs_k_pack, rhs_k_pack)]
    out_dtype = T.float32 if out_dtype is None else _const(gen, node, out_dtype, "tl.dot_scaled's out_dtype")
    return DS.dot_scaled(gen.b, lhs, lhs_scale, fmts[0], rhs, rhs_scale, fmts[1], acc, fast_math, *packs, out_dtype)


# -- tensor attributes and methods ---------------------------------------------------------------
class TensorMethod:
    """`x.to`, `x.sum`, … bound to a value; called by the code generator like a builtin."""

    def __init__(self, value, name):
        self.value, self.name = value, name

    def __call__(self, gen, node, *args, **kwargs):
        impl = _METHODS.get(self.name) or BUILTINS[self.name]
        return impl(gen, node, self.value, *args, **kwargs)


def _to(gen, node, x, dtype, fp_downcast_rounding=None, bitcast=False):
    return cast(gen, node, x, dtype, fp_downcast_rounding, bitcast)


_METHODS = {
    "to": _to, "sum": BUILTINS["sum"], "max": BUILTINS["max"], "min": BUILTINS["min"],
    "argmax": BUILTINS["argmax"], "argmin": BUILTINS["argmin"], "cumsum": BUILTINS["cumsum"],
    "reshape": BUILTINS["reshape"], "view": BUILTINS["view"], "trans": BUILTINS["trans"],
    "permute": BUILTINS["permute"], "expand_dims": BUILTINS["expand_dims"],
    "broadcast_to": BUILTINS["broadcast_to"], "exp": BUILTINS["exp"], "exp2": BUILTINS["exp2"],
    "log": BUILTINS["log"], "log2": BUILTINS["log2"], "sqrt": BUILTINS["sqrt"], "abs": BUILTINS["abs"],
    "sigmoid": BUILTINS["sigmoid"], "ravel": BUILTINS["ravel"], "xor_sum": BUILTINS["xor_sum"],
    # the rest of Triton's tl.math tensor members
    "cos": BUILTINS["cos"], "sin": BUILTINS["sin"], "sqrt_rn": BUILTINS["sqrt_rn"], "erf": BUILTINS["erf"],
    "floor": BUILTINS["floor"], "ceil": BUILTINS["ceil"], "rsqrt": BUILTINS["rsqrt"],
    # shape ops, scans, sorts
    "split": BUILTINS["split"], "cumprod": BUILTINS["cumprod"], "reduce": BUILTINS["reduce"],
    "associative_scan": BUILTINS["associative_scan"], "gather": BUILTINS["gather"], "flip": BUILTINS["flip"],
    "sort": BUILTINS["sort"], "histogram": BUILTINS["histogram"],
}


# The tl functions Triton also makes tensor methods (`x.cast(...)`, `x.sum(0)`, `p.store(v)`): each
# is one where blocktune has the builtin, with the value as its first argument.
_TRITON_MEMBER_FUNCTIONS = frozenset({
    "abs", "advance", "argmax", "argmin", "associative_scan", "atomic_add", "atomic_and", "atomic_cas",
    "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor", "broadcast_to", "cast", "cdiv",
    "ceil", "cos", "cumprod", "cumsum", "erf", "exp", "exp2", "expand_dims", "flip", "floor", "gather",
    "histogram", "item", "log", "log2", "max", "min", "permute", "ravel", "reduce", "reduce_or", "reshape",
    "rsqrt", "sigmoid", "sin", "softmax", "split", "sqrt", "sqrt_rn", "store", "sum", "trans", "view",
    "xor_sum",
})


_TENSOR_PROPERTIES = ("dtype", "type", "shape", "numel", "T")


def tensor_has_attribute(attr: str) -> bool:
    """Whether `tensor_attribute` answers `attr` (Python's `hasattr` on a kernel value)."""
    return attr in _TENSOR_PROPERTIES or attr in _METHODS or (attr in _TRITON_MEMBER_FUNCTIONS and attr in BUILTINS)


def tensor_attribute(b, x: ir.Value, attr: str):
    if attr == "dtype":
        return x.dtype
    if attr == "type":
        return x.type
    if attr == "shape":
        return tuple(x.shape)
    if attr == "numel":
        return x.type.numel if x.is_block else 1
    if attr == "T":
        return S.trans(b, x)
    if attr in _METHODS or (attr in _TRITON_MEMBER_FUNCTIONS and attr in BUILTINS):
        return TensorMethod(x, attr)
    raise SemanticError(f"a value of type {x.type} has no attribute '{attr}'")


