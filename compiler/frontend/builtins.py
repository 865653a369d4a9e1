"""Lowering of `tl.*` builtins and tensor methods: one rule per name.

Each rule takes the code generator, the call's AST node, and the evaluated arguments (IR values or
compile-time Python values) exactly as the user wrote them, with Triton's signatures.
"""
from __future__ import annotations

import builtins

from .. import ir
from ..language import dtypes as T
from ..language.core import constexpr
from ..language.dtypes import block_type, dtype
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
    for s in shape:
        if not isinstance(s, int) or s <= 0 or s & (s - 1):
            raise SemanticError(f"block dimensions must be powers of two, got {list(shape)}")
    return shape


def _axis(gen, node, axis):
    return None if axis is None else int(_const(gen, node, axis, "axis"))


# -- programs and index spaces --------------------------------------------------------------------
@rule("program_id")
def program_id(gen, node, axis=0):
    axis = _const(gen, node, axis, "tl.program_id's axis")
    if axis not in (0, 1, 2):
        raise SemanticError(f"program_id axis must be 0, 1 or 2, got {axis}")
    return gen.b.value("program_id", [], T.int32, axis=axis)


@rule("num_programs")
def num_programs(gen, node, axis=0):
    axis = _const(gen, node, axis, "tl.num_programs's axis")
    if axis not in (0, 1, 2):
        raise SemanticError(f"num_programs axis must be 0, 1 or 2, got {axis}")
    return gen.b.value("num_programs", [], T.int32, axis=axis)


@rule("arange")
def arange(gen, node, start, end):
    start, end = _const(gen, node, start, "tl.arange's start"), _const(gen, node, end, "tl.arange's end")
    n = end - start
    if n <= 0 or n & (n - 1):
        raise SemanticError(f"tl.arange's range must be a power of two, got {start}..{end} ({n} elements)")
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


@rule("static_assert")
def static_assert(gen, node, cond, msg=""):
    if is_value(cond):
        raise SemanticError("tl.static_assert needs a compile-time condition")
    if not cond:
        raise CompileTimeAssertionFailure(f"static assertion failed: {gen.text(node, msg)}", gen.loc(node),
                                          gen.source_line(node))


@rule("static_print")
def static_print(gen, node, *values):
    print(*(gen.text(node, v) if not is_value(v) else v for v in values))


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
def ravel(gen, node, x):
    return S.reshape(gen.b, x, (x.type.numel,), False)


@rule("trans", "permute")
def trans(gen, node, input, *dims):
    dims = _shape_args(gen, node, dims) if dims else None
    return S.trans(gen.b, input, dims)


@rule("expand_dims")
def expand_dims(gen, node, input, axis):
    axes = _const(gen, node, axis, "axis")
    axes = axes if isinstance(axes, (tuple, list)) else (axes,)
    out = input
    for a in sorted(axes):
        out = S.expand_dims(gen.b, out, a)
    return out


@rule("broadcast_to")
def broadcast_to(gen, node, input, *shape):
    return S.broadcast_to(gen.b, S.to_tensor(gen.b, input), _shape_args(gen, node, shape))


@rule("broadcast")
def broadcast(gen, node, input, other):
    return S.broadcast_pair(gen.b, S.to_tensor(gen.b, input), S.to_tensor(gen.b, other))


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
        nan = propagate_nan is not None and str(getattr(propagate_nan, "name", propagate_nan)).upper().endswith("ALL")
        return S.minmax(gen.b, which, x, y, nan)
    return impl


BUILTINS["maximum"] = _minmax("maximum")
BUILTINS["minimum"] = _minmax("minimum")


@rule("clamp")
def clamp(gen, node, x, min, max, propagate_nan=None):
    x = S.to_tensor(gen.b, x)
    if not x.dtype.is_floating():
        raise SemanticError(f"tl.clamp needs a floating-point value, got {x.dtype}")
    return S.minmax(gen.b, "minimum", S.minmax(gen.b, "maximum", x, min), max)


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
    return S.cast(gen.b, input, _const(gen, node, dtype, "dtype"), bitcast=bool(bitcast))


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


@rule("cumsum")
def cumsum(gen, node, input, axis=0, reverse=False):
    return S.scan(gen.b, input, _axis(gen, node, axis), "sum", bool(reverse))


@rule("cumprod")
def cumprod(gen, node, input, axis=0, reverse=False):
    return S.scan(gen.b, input, _axis(gen, node, axis), "prod", bool(reverse))


# -- memory ----------------------------------------------------------------------------------
@rule("load")
def load(gen, node, pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    if boundary_check:
        raise SemanticError("block pointers (boundary_check) are not supported yet; use masks")
    return S.load(gen.b, pointer, mask, other, cache_modifier, eviction_policy, volatile)


@rule("store")
def store(gen, node, pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    if boundary_check:
        raise SemanticError("block pointers (boundary_check) are not supported yet; use masks")
    S.store(gen.b, pointer, value, mask, cache_modifier, eviction_policy)


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


# -- tensor attributes and methods ---------------------------------------------------------------
class TensorMethod:
    """`x.to`, `x.sum`, … bound to a value; called by the code generator like a builtin."""

    def __init__(self, value, name):
        self.value, self.name = value, name

    def __call__(self, gen, node, *args, **kwargs):
        return _METHODS[self.name](gen, node, self.value, *args, **kwargs)


def _to(gen, node, x, dtype, fp_downcast_rounding=None, bitcast=False):
    return S.cast(gen.b, x, _const(gen, node, dtype, "dtype"), bitcast=bool(bitcast))


_METHODS = {
    "to": _to, "sum": BUILTINS["sum"], "max": BUILTINS["max"], "min": BUILTINS["min"],
    "argmax": BUILTINS["argmax"], "argmin": BUILTINS["argmin"], "cumsum": BUILTINS["cumsum"],
    "reshape": BUILTINS["reshape"], "view": BUILTINS["view"], "trans": BUILTINS["trans"],
    "permute": BUILTINS["permute"], "expand_dims": BUILTINS["expand_dims"],
    "broadcast_to": BUILTINS["broadcast_to"], "exp": BUILTINS["exp"], "exp2": BUILTINS["exp2"],
    "log": BUILTINS["log"], "log2": BUILTINS["log2"], "sqrt": BUILTINS["sqrt"], "abs": BUILTINS["abs"],
    "sigmoid": BUILTINS["sigmoid"], "ravel": BUILTINS["ravel"], "xor_sum": BUILTINS["xor_sum"],
}


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
    if attr in _METHODS:
        return TensorMethod(x, attr)
    raise SemanticError(f"a value of type {x.type} has no attribute '{attr}'")


