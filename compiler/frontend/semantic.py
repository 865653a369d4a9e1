"""Typed construction of block IR: Triton's promotion, broadcasting and casting rules.

The code generator hands this module front-end values: an `ir.Value` (a runtime scalar or block)
or a plain Python value (a compile-time constant: int, float, bool, None, dtype, …). Python
scalars are *weakly typed*, as in Triton: `x_fp16 * 2.0` stays fp16.
"""
from __future__ import annotations

import builtins
import re
import warnings

from .. import ir, knobs
from ..language import dtypes as T
from ..language.dtypes import block_type, dtype, pointer_type, scalar_of, shape_of
from .lifted import unlift
from .limits import MAX_IR_OPS, TRITON_MAX_TENSOR_NUMEL


class SemanticError(Exception):
    """A typing or shape error; the code generator attaches the source location. `str()` is the
    message alone (Triton's words where Triton has them: its tests compare them); `detail` says
    what was found, for the CompilationError's message."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail

    def described(self) -> str:
        return f"{self}: {self.detail}" if self.detail else str(self)


class Builder:
    """Appends ops to the current block; remembers the source location of the node being built.

    It also keeps one specialization's compile-time work within the bounds of `limits`: the IR ops
    emitted, the syntax-node visits of the code generator (`steps`), and the size of every block.
    """

    def __init__(self):
        self.block: ir.Block | None = None
        self.loc: ir.Loc = ir.UNKNOWN_LOC
        self.ops_emitted = 0
        self.steps = 0
        # device-side tensor descriptors through TMA (block_pointers.make_tensor_descriptor): the
        # target when it has TMA, the kernel arguments' known divisibility, the scratch argument
        self.tma_target: str | None = None
        self.gpu_target: str | None = None   # `sm_90`; None in interpret mode
        # the launch's num_warps, when the IR is built for one (tl.extra.cuda.num_warps/num_threads)
        self.num_warps: int | None = None
        self.arg_divisibility: dict[int, int] = {}
        self.global_scratch: ir.Value | None = None
        self.function_body: ir.Block | None = None
        self.tensor_maps = 0
        self.gpu_refusals: list = []    # ir.Function.gpu_refusals
        # a GPU build's noinline @jit functions, by device-function name (ir.Function.device_functions);
        # None: they are inlined (interpret mode)
        self.device_functions: dict | None = None
        self.generate_ir = None    # frontend.generate_ir, which builds them (set by it: no import circle)

    def create(self, name, operands=(), result_types=(), attrs=None, regions=()) -> ir.Op:
        if name in _NO_FP8_OPERANDS:
            _refuse_fp8_arithmetic(name, operands)
        self.ops_emitted += 1
        if self.ops_emitted > MAX_IR_OPS:
            raise SemanticError(f"the kernel expands to more than {MAX_IR_OPS} IR operations (unrolled "
                                "tl.static_range loops or inlined @jit calls multiply its code); refusing to compile it")
        for ty in result_types:
            if isinstance(ty, block_type):
                check_numel(ty.shape)
        op = ir.Op(name, operands, result_types, attrs, regions, self.loc)
        self.block.ops.append(op)
        return op

    def value(self, name, operands, result_type, **attrs) -> ir.Value:
        return self.create(name, operands, [result_type], attrs).result


# Ops that compute on their operands' values: fp8 values (held as their bits) must be cast to a
# wider float first. Arithmetic with fp8 operands is promoted by the front end (computation_type);
# what reaches here is a reduction, a scan, an atomic or a sort of fp8 values, which Triton cannot
# compile for NVIDIA GPUs either.
_NO_FP8_OPERANDS = frozenset((
    "add", "sub", "mul", "fdiv", "div", "rem", "maximum", "minimum", "maximum_nan", "minimum_nan", "cmp",
    "neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil", "erf", "tanh",
    "fma", "umulhi", "extern_elementwise", "reduce", "scan", "atomic_rmw", "atomic_cas", "sort", "histogram"))


def _refuse_fp8_arithmetic(name, operands) -> None:
    for v in operands:
        if isinstance(v, ir.Value) and not v.dtype.is_ptr() and v.dtype.is_fp8():
            raise SemanticError(f"{name} of {v.dtype} values is not supported: fp8 is a storage and tl.dot "
                                f"operand type here; cast with .to(tl.float32) first")


def check_numel(shape) -> None:
    """Triton's bound on the elements of one block."""
    numel = 1
    for d in shape:
        numel *= d
    if numel > TRITON_MAX_TENSOR_NUMEL:
        raise SemanticError(f"numel ({numel}) exceeds triton maximum tensor numel ({TRITON_MAX_TENSOR_NUMEL}): "
                            f"a block of shape {list(shape)} is too large")


def is_value(x) -> bool:
    return isinstance(x, ir.Value)


def _with_shape(elt: dtype, shape: tuple):
    return block_type(elt, shape) if shape else elt


# ---------------------------------------------------------------------------------------------
# Python constants → typed IR values

def literal_type(v) -> dtype:
    if isinstance(v, bool):
        return T.int1
    if isinstance(v, int):
        if -2**31 <= v < 2**31:
            return T.int32
        if 0 <= v < 2**32:  # as Triton: 0xD2511F53 is a uint32, so `c * 0xD2511F53` stays 32-bit
            return T.uint32
        if -2**63 <= v < 2**63:
            return T.int64
        if 0 <= v < 2**64:
            return T.uint64
        raise SemanticError(f"integer constant {v} does not fit in 64 bits")
    if isinstance(v, float):
        return T.float32
    raise SemanticError(f"expected a number, got {type(v).__name__} {v!r}")


def const(b: Builder, v, ty) -> ir.Value:
    elt = scalar_of(ty)
    if elt.is_floating():
        v = float(v)
    elif elt.is_bool():
        v = bool(v)
    else:
        v = int(v)
        bits = elt.primitive_bitwidth
        v &= (1 << bits) - 1  # two's complement wrap, then back to the signed range
        if elt.is_int_signed() and v >= 1 << (bits - 1):
            v -= 1 << bits
    return b.value("const", [], ty, value=v)


def to_tensor(b: Builder, x, ty=None) -> ir.Value:
    if is_value(x):
        return x
    if isinstance(x, (bool, int, float)):
        return const(b, x, ty if ty is not None else literal_type(x))
    raise SemanticError(f"expected a tensor or a number, got {type(x).__name__} {x!r}")


# ---------------------------------------------------------------------------------------------
# Shapes

def splat(b: Builder, x: ir.Value, shape: tuple) -> ir.Value:
    if x.shape == tuple(shape):
        return x
    if x.owner is not None and x.owner.name == "const" and not x.is_block:
        return b.value("const", [], block_type(x.dtype, shape), value=x.owner.attrs["value"])
    return b.value("splat", [x], block_type(x.dtype, shape))


def broadcast_to(b: Builder, x: ir.Value, shape: tuple) -> ir.Value:
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if not x.is_block:
        return splat(b, x, shape)
    src = x.shape
    if len(src) > len(shape):
        raise SemanticError(f"cannot broadcast shape {list(src)} to {list(shape)}")
    while len(src) < len(shape):  # align ranks on the right, as numpy does
        x = expand_dims(b, x, 0)
        src = x.shape
    for s, d in zip(src, shape):
        if s != d and s != 1:
            raise SemanticError(f"cannot broadcast shape {list(x.shape)} to {list(shape)}")
    if src == shape:
        return x
    return b.value("broadcast", [x], block_type(x.dtype, shape))


def broadcast_shapes(*shapes) -> tuple:
    rank = builtins.max((len(s) for s in shapes), default=0)
    out = []
    for i in builtins.range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise SemanticError("incompatible shapes for broadcasting: " + ", ".join(str(list(s)) for s in shapes))
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_pair(b: Builder, x: ir.Value, y: ir.Value):
    if x.shape == y.shape:
        return x, y
    shape = broadcast_shapes(x.shape, y.shape)
    return broadcast_to(b, x, shape), broadcast_to(b, y, shape)


def wrap_axis(axis: int, ndim: int) -> int:
    """A possibly negative axis of an `ndim`-D shape as 0 ≤ axis < ndim (Triton's wording when not)."""
    if not -ndim <= axis < ndim:
        raise SemanticError(f"invalid axis {axis}. Expected {-ndim} <= axis < {ndim}")
    return axis if axis >= 0 else axis + ndim


def expand_dims(b: Builder, x, axis: int) -> ir.Value:
    x = to_tensor(b, x)
    rank = len(x.shape)
    axis = wrap_axis(axis, rank + 1)
    if not x.is_block:
        return splat(b, x, (1,))
    shape = x.shape[:axis] + (1,) + x.shape[axis:]
    return b.value("expand_dims", [x], block_type(x.dtype, shape), axis=axis)


def reshape(b: Builder, x: ir.Value, shape, can_reorder=False) -> ir.Value:
    shape = tuple(int(s) for s in shape)
    numel = 1
    for s in shape:
        numel *= s
    have = x.type.numel if x.is_block else 1
    if numel != have:
        raise SemanticError(f"reshape: cannot reshape {have} elements into shape {list(shape)}")
    if not x.is_block:
        return splat(b, x, shape)
    if shape == x.shape:
        return x
    return b.value("reshape", [x], block_type(x.dtype, shape), can_reorder=bool(can_reorder))


def unsplat(b: Builder, x) -> ir.Value:
    """A 1-element block as a scalar (Triton's `x.item()`, and the condition of an `if`)."""
    x = to_tensor(b, x)
    if not x.is_block:
        return x
    if x.type.numel != 1:
        raise SemanticError(f"only a single-element block converts to a scalar (.item()), got a block of shape {list(x.shape)}")
    return b.value("reshape", [x], x.dtype, can_reorder=False)


def trans(b: Builder, x: ir.Value, perm=None) -> ir.Value:
    if not x.is_block:
        raise SemanticError("trans expects a block value")
    rank = len(x.shape)
    if not perm:   # Triton's default: the last two dims swap (a batched 2-D transpose)
        if rank < 2:
            raise SemanticError("tl.trans invoked with a 0- or 1-dimensional tensor")
        perm = (*builtins.range(rank - 2), rank - 1, rank - 2)
    perm = tuple(perm)
    if sorted(perm) != list(builtins.range(rank)):
        raise SemanticError(f"trans: {list(perm)} is not a permutation of the {rank} dims")
    if perm == tuple(builtins.range(rank)):
        return x
    return b.value("trans", [x], block_type(x.dtype, tuple(x.shape[p] for p in perm)), perm=perm)


def join(b: Builder, x, y) -> ir.Value:
    """Two values side by side in a new minor dim of size 2 (broadcast to one shape first)."""
    x, y = to_tensor(b, x), to_tensor(b, y)
    if x.dtype != y.dtype:
        raise SemanticError(f"tl.join needs two values of one type, got {x.dtype} and {y.dtype}; cast one first")
    x, y = broadcast_pair(b, x, y)
    return b.value("join", [x, y], block_type(x.dtype, x.shape + (2,)))


def split(b: Builder, x) -> tuple:
    """The inverse of join: (x[..., 0], x[..., 1])."""
    x = to_tensor(b, x)
    if not x.is_block or x.shape[-1] != 2:
        raise SemanticError(f"tl.split needs a block whose last dimension has size 2, got {x.type}")
    ty = _with_shape(x.dtype, x.shape[:-1])
    return tuple(b.create("split", [x], [ty, ty]).results)


def _dim(x: ir.Value, dim, what: str) -> int:
    rank = len(x.shape)
    dim = rank - 1 if dim is None else int(dim)
    if not -rank <= dim < rank:
        raise SemanticError(f"{what}: dim {dim} out of range for a {rank}-D block")
    return dim % rank


def gather(b: Builder, src, index, axis) -> ir.Value:
    src, index = to_tensor(b, src), to_tensor(b, index)
    if not src.is_block or not index.is_block or len(src.shape) != len(index.shape):
        raise SemanticError(f"tl.gather needs a source and an index block of one rank, got {src.type} and {index.type}")
    if not index.dtype.is_int():
        raise SemanticError(f"tl.gather's index must hold integers, got {index.dtype}")
    axis = _dim(src, axis, "tl.gather")
    for d, (s, i) in enumerate(zip(src.shape, index.shape)):
        if d != axis and s != i:
            raise SemanticError(f"tl.gather: the index's shape {list(index.shape)} must equal the source's "
                                f"{list(src.shape)} in every dim but axis {axis}")
    if src.dtype.is_ptr():
        raise SemanticError("tl.gather of pointers is not supported; gather offsets and add them to the pointer")
    return b.value("gather", [src, index], block_type(src.dtype, index.shape), axis=axis)


def flip(b: Builder, x, dim=None) -> ir.Value:
    x = to_tensor(b, x)
    if not x.is_block:
        raise SemanticError(f"tl.flip needs a block, got {x.type}")
    if x.dtype.is_ptr():
        raise SemanticError("tl.flip of pointers is not supported; flip the offsets")
    return b.value("flip", [x], x.type, dim=_dim(x, dim, "tl.flip"))


def sort(b: Builder, x, dim=None, descending=False) -> ir.Value:
    x = to_tensor(b, x)
    if not x.is_block:
        raise SemanticError(f"tl.sort needs a block, got {x.type}")
    if x.dtype.is_ptr():
        raise SemanticError("tl.sort of pointers is not supported")
    return b.value("sort", [x], x.type, dim=_dim(x, dim, "tl.sort"), descending=bool(descending))


def topk(b: Builder, x, k: int, dim=None) -> ir.Value:
    """`tl.topk`: the k largest elements along the last dim, largest first. A descending sort
    viewed as [..., N/k, k] rows: row 0 is, element by element, ≥ every later row, so the max over
    the rows is row 0 (the ops tl.sort and tl.max already lower; N and k powers of two, as Triton's
    bitonic top-k needs)."""
    x = to_tensor(b, x)
    if not x.is_block:
        raise SemanticError(f"tl.topk needs a block, got {x.type}")
    dim = _dim(x, dim, "tl.topk")
    n = x.shape[-1]
    if dim != len(x.shape) - 1:
        raise SemanticError("tl.topk: only the minor (last) dimension is supported")
    if not isinstance(k, int) or k < 1 or k & (k - 1) or k > n or n & (n - 1):
        raise SemanticError(f"tl.topk: k must be a power of two no larger than the dim's size {n} "
                            f"(itself a power of two), got k={k}")
    out = sort(b, x, dim, descending=True)
    if k == n:
        return out
    rows = reshape(b, out, x.shape[:-1] + (n // k, k))
    return reduce(b, rows, len(x.shape) - 1, "max")


def histogram(b: Builder, x, num_bins: int, mask=None) -> ir.Value:
    x = to_tensor(b, x)
    if not x.is_block or len(x.shape) != 1:
        raise SemanticError(f"tl.histogram needs a 1-D block, got {x.type}")
    if not x.dtype.is_int() or x.dtype.is_bool():
        raise SemanticError(f"tl.histogram needs integers, got {x.dtype}")
    if not isinstance(num_bins, int) or num_bins <= 0 or num_bins & (num_bins - 1):
        raise SemanticError(f"tl.histogram: num_bins must be a power of two, got {num_bins}")
    if mask is not None:
        mask = broadcast_to(b, to_bool(b, mask), x.shape)
    return b.value("histogram", [x, mask], block_type(T.int32, (num_bins,)), num_bins=num_bins)


# ---------------------------------------------------------------------------------------------
# Types: Triton's computation-type rules

# Triton's order of kinds (bool < integer < floating): a Python int meeting a uint8 block is a uint8
_KIND_RANK = {T.dtype.BOOL: 0, T.dtype.UINT: 1, T.dtype.SINT: 1, T.dtype.FLOAT: 2}


def integer_promote(a: dtype, c: dtype) -> dtype:
    ar, cr = a.int_bitwidth, c.int_bitwidth
    asn, csn = a.is_int_unsigned(), c.is_int_unsigned()
    if a.is_bool() and c.is_bool():
        return T.int1
    if a.is_bool():
        return c
    if c.is_bool():
        return a
    if asn == csn:
        return a if ar > cr else c
    if asn:
        return a if ar >= cr else c
    return c if cr >= ar else a


def computation_type(a: dtype, a_scalar: bool, c: dtype, c_scalar: bool, div_or_mod: bool) -> dtype:
    if a_scalar != c_scalar:
        s, t = (a, c) if a_scalar else (c, a)
        if _KIND_RANK[s.kind] <= _KIND_RANK[t.kind]:
            if div_or_mod and t in (T.float16, T.bfloat16):
                return T.float32
            if t.is_fp8():  # fp8 values are computed on in fp16 (as two different fp8 types are)
                return T.float16
            return t
    if a.is_fp64() or c.is_fp64():
        return T.float64
    if a.is_fp32() or c.is_fp32():
        return T.float32
    if a.is_fp16() or c.is_fp16():
        return T.float32 if div_or_mod else T.float16
    if a.is_bf16() or c.is_bf16():
        if div_or_mod:
            return T.float32
        return T.bfloat16 if a.is_bf16() and c.is_bf16() else T.float32
    if a.is_floating() or c.is_floating():  # fp8 mixes
        return T.float16
    if div_or_mod and a.int_signedness != c.int_signedness and not (a.is_bool() or c.is_bool()):
        raise SemanticError(f"Cannot use /, //, or % with {a} and {c} because they have different signedness; "
                            "cast them to the same signedness first")
    return integer_promote(a, c)


def cast(b: Builder, x, to: dtype, bitcast: bool = False, fp_downcast_rounding: str | None = None) -> ir.Value:
    if isinstance(to, block_type):
        to = to.element_ty
    x = to_tensor(b, x, to if not is_value(x) else None)
    src = x.dtype
    rounding = _downcast_rounding(src, to, fp_downcast_rounding)
    if src == to:
        return x
    ty = _with_shape(to, x.shape)
    if src.is_ptr() and to.is_ptr():
        return b.value("bitcast", [x], ty)  # a pointer to another element type: same address
    if bitcast:
        if src.primitive_bitwidth != to.primitive_bitwidth:
            raise SemanticError(f"bitcast needs equal bit widths: {src} is {src.primitive_bitwidth} bits, {to} is {to.primitive_bitwidth}")
        return b.value("bitcast", [x], ty)
    if src.is_fp8e4b15() or to.is_fp8e4b15():
        return _fp8e4b15_cast(b, x, to)
    if src.is_fp8() or to.is_fp8():
        _check_fp8_cast(src, to, rounding)
        return b.value("cast", [x], ty, **({"rounding": rounding} if rounding == "rtz" else {}))
    if rounding == "rtz":
        return b.value("cast", [x], ty, rounding=rounding)
    if x.owner is not None and x.owner.name == "const" and not to.is_ptr() and not src.is_ptr():
        v = x.owner.attrs["value"]
        if to.is_bool():
            v = v != 0
        elif to.is_int() and src.is_floating():
            v = int(v)
        return const(b, v, ty)
    return b.value("cast", [x], ty)


def _downcast_rounding(src, to, rounding):
    """Triton's fp_downcast_rounding: "rtne" (the default) or "rtz", only for a floating-point
    conversion to fewer bits."""
    if rounding is None:
        return None
    downcast = (not src.is_ptr() and not to.is_ptr() and src.is_floating() and to.is_floating()
                and to.primitive_bitwidth < src.primitive_bitwidth)
    if not downcast:
        raise SemanticError("fp_downcast_rounding should be set only for truncating fp conversions. "
                            f"Source scalar type is {src} and destination type is {to}")
    rounding = str(rounding).lower()
    if rounding not in ("rtne", "rtz"):
        raise SemanticError(f"fp_downcast_rounding must be 'rtne' or 'rtz', got {rounding!r}")
    return rounding


# float8e4b15 (fp8 e4m3 with exponent bias 15, Triton's) converted as Triton converts it on NVIDIA
# GPUs: no hardware has it, so Triton's conversions are bit manipulations (its inline asm in
# triton/language/extra/cuda/utils.py), built here from integer block ops, which then run the same
# in interpret mode and through the NVPTX backend, bit for bit. e4b15 shares fp16's exponent bias:
#   e4b15 → fp16   sign to bit 15, the 7 other bits to bits 13..7: exact (no NaN or infinity:
#                  S.1111.111 is ±1.875); to other types through fp16 (exact too)
#   fp16 → e4b15   |x| clamped to 1.75 (0x3F00; infinities and NaN too, as `min.f16x2` does), the
#                  low 8 bits of |x| << 1 rounded half up into the high byte, and the sign
#   fp32 → e4b15   to fp16 rounding toward zero (Triton's `rtz`), then as fp16
# Triton converts only fp16 and fp32 to e4b15: other sources are refused.
_E4B15_MAX_F16_BITS = 0x3F00     # 1.75, the largest value Triton's downcast produces


def _fp8e4b15_cast(b: Builder, x: ir.Value, to: dtype) -> ir.Value:
    u16 = lambda v: cast(b, v, T.uint16)  # noqa: E731
    src = x.dtype
    if src.is_fp8e4b15():
        byte = u16(cast(b, x, T.uint8, bitcast=True))
        bits = or_(b, shl(b, and_(b, byte, u16(0x80)), u16(8)), shl(b, and_(b, byte, u16(0x7F)), u16(7)))
        return cast(b, cast(b, bits, T.float16, bitcast=True), to)
    if src.is_fp32():
        x = cast(b, x, T.float16, fp_downcast_rounding="rtz")
    elif not src.is_fp16():
        raise SemanticError(f"cannot cast {src} to fp8e4b15: Triton converts float16 and float32 to it; "
                            "cast to one of them first")
    bits = cast(b, x, T.uint16, bitcast=True)
    mag = minmax(b, "minimum", and_(b, bits, u16(0x7FFF)), u16(_E4B15_MAX_F16_BITS))
    rounded = shr(b, add(b, shl(b, mag, u16(1)), u16(0x80)), u16(8))
    code = or_(b, rounded, and_(b, shr(b, bits, u16(8)), u16(0x80)))
    return cast(b, cast(b, code, T.uint8), T.float8e4b15, bitcast=True)


def _check_fp8_cast(src, to, rounding) -> None:
    """The fp8 conversions there are: with fp16, bf16, fp32 (fp64 upcasts only) and between fp8
    kinds; rounding toward zero only into float8e5 (Triton's fp16 → e5m2 truncation)."""
    if src.is_ptr() or to.is_ptr() or not src.is_floating() or not to.is_floating():
        raise SemanticError(f"cannot cast {src} to {to}: fp8 converts only to and from floating-point types; "
                            "cast through tl.float32")
    if src.is_fp64():
        raise SemanticError(f"cannot cast fp64 to {to} directly (Triton has no such conversion; rounding "
                            "through fp32 could round twice): cast to tl.float32 first")
    if rounding == "rtz" and not to.is_fp8e5():
        raise SemanticError(f"fp_downcast_rounding='rtz' is not supported for conversions to {to} "
                            "(only to tl.float8e5, as in Triton)")


def binary_operands(b: Builder, x, y, div_or_mod=False, allow_ptr=False):
    """Cast and broadcast two operands to their common type (Triton's binary_op_type_checking)."""
    xs, ys = not is_value(x), not is_value(y)
    if xs and ys:
        raise SemanticError("internal: both operands are constants")
    xt = literal_type(x) if xs else x.dtype
    yt = literal_type(y) if ys else y.dtype
    if xt.is_ptr() or yt.is_ptr():
        if not allow_ptr:
            raise SemanticError(f"this operator does not take pointers ({xt} and {yt})")
        return broadcast_pair(b, to_tensor(b, x), to_tensor(b, y))
    ty = computation_type(xt, xs, yt, ys, div_or_mod)
    if ty.is_int():
        for v in (x for x, scalar in ((x, xs), (y, ys)) if scalar):
            _check_int_range(v, ty)
    x, y = cast(b, x, ty), cast(b, y, ty)
    return broadcast_pair(b, x, y)


def _check_int_range(v, ty: dtype) -> None:
    """A Python int meeting an integer tensor takes the tensor's type: it must fit (Triton's check;
    wrapping it silently would compute with another number)."""
    bits = ty.primitive_bitwidth
    lo, hi = (-2**(bits - 1), 2**(bits - 1) - 1) if ty.is_int_signed() else (0, 2**bits - 1)
    if isinstance(v, (int, float)) and v < 0 and ty.is_int_unsigned():
        raise SemanticError(f"Cannot perform a binary operation between an unsigned tensor ({ty}) and a negative "
                            f"scalar ({v}). Perform an explicit cast on one of them.")
    if isinstance(v, int) and not lo <= v <= hi:
        raise SemanticError(f"Scalar {v} is out of range for type {ty} ({lo}..{hi}); cast the tensor to a wider "
                            "type first, e.g. x.to(tl.int64)")


# ---------------------------------------------------------------------------------------------
# Arithmetic

def add(b, x, y):
    if _is_ptr(x) and _is_ptr(y):
        raise SemanticError("cannot add two pointers")
    if _is_ptr(y):
        x, y = y, x
    if _is_ptr(x):
        return addptr(b, x, y)
    x, y = binary_operands(b, x, y)
    return b.value("add", [x, y], x.type)


def sub(b, x, y):
    if _is_ptr(x):
        if _is_ptr(y):
            raise SemanticError("subtracting pointers is not supported; subtract offsets instead")
        return addptr(b, x, neg(b, y))
    x, y = binary_operands(b, x, y)
    return b.value("sub", [x, y], x.type)


def mul(b, x, y):
    x, y = binary_operands(b, x, y)
    return b.value("mul", [x, y], x.type)


def truediv(b, x, y, ieee=False):
    """`/`: like Triton, fp32 division is the fast `div.full.f32` (2 ulp) unless `ieee`."""
    x, y = binary_operands(b, x, y, div_or_mod=True)
    if x.dtype.is_int():
        x, y = cast(b, x, T.float32), cast(b, y, T.float32)
    return b.value("fdiv", [x, y], x.type, ieee=ieee)


def floordiv(b, x, y):
    x, y = binary_operands(b, x, y, div_or_mod=True)
    if x.dtype.is_floating():
        raise SemanticError("// is only defined on integers in kernels; use / (or tl.floor(a / b))")
    return b.value("div", [x, y], x.type)


def mod(b, x, y):
    x, y = binary_operands(b, x, y, div_or_mod=True)
    return b.value("rem", [x, y], x.type)


def _int_binary(name):
    def op(b, x, y):
        given = [v.dtype if is_value(v) else literal_type(v) for v in (x, y)]
        x, y = binary_operands(b, x, y)
        if not x.dtype.is_int():   # Triton's wording, which its tests match
            raise SemanticError(f"invalid operands of type {given[0]} and {given[1]}: operator {name} needs "
                                f"integer operands")
        return b.value(name, [x, y], x.type)
    return op


and_ = _int_binary("and")
or_ = _int_binary("or")
xor_ = _int_binary("xor")
shl = _int_binary("shl")
_shr_in_type = _int_binary("shr")


def shr(b, x, y):
    """`>>` in the operands' common type, arithmetic when the tensor that decides is signed: the left
    one, or the right one when the left is a Python scalar (Triton's __rshift__ / __rrshift__), so
    `int32 >> uint32` shifts in sign bits although the result is uint32."""
    decider = x if is_value(x) else y
    arithmetic = decider.dtype.is_int_signed()
    x, y = binary_operands(b, x, y)
    if not x.dtype.is_int() or arithmetic == x.dtype.is_int_signed():
        return _shr_in_type(b, x, y)
    bits = x.dtype.primitive_bitwidth
    shift_type = T.dtype(f"int{bits}" if arithmetic else f"uint{bits}")
    shifted = _shr_in_type(b, cast(b, x, shift_type), cast(b, y, shift_type))
    return cast(b, shifted, x.dtype)


def minmax(b, name, x, y, propagate_nan=False):
    x, y = binary_operands(b, x, y)
    if propagate_nan and x.dtype.is_floating():
        name += "_nan"
    return b.value(name, [x, y], x.type)


def compare(b, pred, x, y):
    x, y = binary_operands(b, x, y, allow_ptr=True)
    return b.value("cmp", [x, y], _with_shape(T.int1, x.shape), pred=pred)


def neg(b, x):
    if not is_value(x):
        return -x
    if x.dtype.is_ptr():
        raise SemanticError("cannot negate a pointer")
    if x.dtype.is_fp8():
        return _fp8_sign_op(b, "neg", x)
    return b.value("neg", [x], x.type)


def _fp8_sign_op(b, name, x):
    """-x and |x| of fp8 values: the sign bit flipped or cleared (exact, as for any float). The
    "fnuz" formats have no negative zero (0x80 is their NaN): they go through fp16."""
    if x.dtype.is_fp8e4b8() or x.dtype.is_fp8e5b16():
        wide = cast(b, x, T.float16)
        return cast(b, b.value(name, [wide], wide.type), x.dtype)
    bits = cast(b, x, T.uint8, bitcast=True)
    bits = xor_(b, bits, const(b, 0x80, bits.type)) if name == "neg" else and_(b, bits, const(b, 0x7F, bits.type))
    return cast(b, bits, x.dtype, bitcast=True)


def invert(b, x):
    if not x.dtype.is_int():
        raise SemanticError(f"~ needs an integer operand, got {x.dtype}")
    return b.value("not", [x], x.type)


def logical_not(b, x):
    x = to_bool(b, x)
    return b.value("not", [x], x.type)


def to_bool(b, x) -> ir.Value:
    x = to_tensor(b, x)
    if x.dtype.is_bool():
        return x
    return compare(b, "ne", x, 0)


def logical(b, name, x, y):
    x, y = to_bool(b, x), to_bool(b, y)
    x, y = broadcast_pair(b, x, y)
    return b.value(name, [x, y], x.type)


def addptr(b, ptr: ir.Value, offset) -> ir.Value:
    offset = to_tensor(b, offset)
    if not offset.dtype.is_int():
        raise SemanticError(f"pointer offsets must be integers, got {offset.dtype}")
    ptr, offset = broadcast_pair(b, ptr, offset)
    return b.value("addptr", [ptr, offset], ptr.type)


def _is_ptr(x) -> bool:
    return is_value(x) and x.dtype.is_ptr()


def unary_math(b, name, x, **attrs):
    x = to_tensor(b, x)
    if name not in ("abs", "neg") and not x.dtype.is_floating():
        raise SemanticError(f"tl.{name} expects a floating-point argument, got {x.dtype}; cast with .to(tl.float32)")
    if name == "abs" and x.dtype.is_int_unsigned():
        return x
    if name == "abs" and x.dtype.is_fp8():
        return _fp8_sign_op(b, name, x)
    return b.value(name, [x], x.type, **attrs)


def where(b, cond, x, y):
    if is_value(cond) and cond.dtype != T.int1:   # Triton's words
        warnings.warn("tl.where with a non-boolean condition is deprecated and will error out in a future triton "
                      f"release. Got {cond.dtype}", stacklevel=2)
    cond = to_bool(b, cond)
    xs, ys = not is_value(x), not is_value(y)
    if xs and ys:
        x, y = to_tensor(b, x), to_tensor(b, y)
        ty = computation_type(x.dtype, False, y.dtype, False, False)
        x, y = cast(b, x, ty), cast(b, y, ty)
    elif _is_ptr(x) or _is_ptr(y):
        x, y = to_tensor(b, x), to_tensor(b, y)
    elif not xs and not ys and x.dtype == y.dtype and x.dtype.is_fp8():
        pass  # selecting between fp8 values keeps their type (no arithmetic)
    else:
        x, y = binary_operands(b, x, y)
    shape = broadcast_shapes(cond.shape, x.shape, y.shape)
    cond, x, y = broadcast_to(b, cond, shape), broadcast_to(b, x, shape), broadcast_to(b, y, shape)
    return b.value("select", [cond, x, y], x.type)


def fma(b, x, y, z):
    x, y = binary_operands(b, x, y)
    x, z = binary_operands(b, x, z)
    x, y = binary_operands(b, x, y)
    return b.value("fma", [x, y, z], x.type)


# ---------------------------------------------------------------------------------------------
# Memory

def _mask_and_other(b, ptr, mask, other):
    shape = ptr.shape
    if mask is not None:
        mask = to_bool(b, mask)
        shape = broadcast_shapes(shape, mask.shape)
    if other is not None and is_value(other):
        shape = broadcast_shapes(shape, other.shape)
    ptr = broadcast_to(b, ptr, shape)
    if mask is not None:
        mask = broadcast_to(b, mask, shape)
    elt = ptr.dtype.element_ty
    if other is not None:
        other = broadcast_to(b, cast(b, other, _load_type(elt)), shape)
    return ptr, mask, other


def _load_type(elt: dtype) -> dtype:
    return elt


LOAD_CACHE_MODIFIERS = ("", ".ca", ".cg", ".cv")
STORE_CACHE_MODIFIERS = ("", ".wb", ".cg", ".cs", ".wt")
EVICTION_POLICIES = ("", "evict_first", "evict_last")


def _check_cache_hints(cache, eviction, allowed):
    if (cache or "") not in allowed:
        raise SemanticError(f"cache modifier {cache!r} is not supported here; use one of {list(allowed[1:])}")
    if (eviction or "") not in EVICTION_POLICIES:
        raise SemanticError(f"eviction policy {eviction!r} is not supported; use one of {list(EVICTION_POLICIES[1:])}")


def load(b, ptr, mask=None, other=None, cache="", eviction="", volatile=False):
    _check_cache_hints(cache, eviction, LOAD_CACHE_MODIFIERS)
    if not _is_ptr(ptr):
        raise SemanticError(f"tl.load expects a pointer or a block of pointers, got {_describe(ptr)}")
    if other is not None and mask is None:
        other = None  # Triton ignores `other` without a mask
    ptr, mask, other = _mask_and_other(b, ptr, mask, other)
    elt = ptr.dtype.element_ty
    if elt.is_ptr() and not isinstance(elt, pointer_type):
        raise SemanticError("unsupported pointer element type")
    return b.value("load", [ptr, mask, other], _with_shape(elt, ptr.shape), cache=cache or "",
                   eviction=eviction or "", volatile=bool(volatile))


def _check_writable(ptr):
    if ptr.dtype.is_const():
        raise SemanticError(f"Cannot store to a constant pointer ({ptr.dtype!r}: a tl.const parameter's data is read-only)")


def store(b, ptr, value, mask=None, cache="", eviction=""):
    _check_cache_hints(cache, eviction, STORE_CACHE_MODIFIERS)
    if not _is_ptr(ptr):
        raise SemanticError(f"tl.store expects a pointer or a block of pointers, got {_describe(ptr)}")
    _check_writable(ptr)
    value = to_tensor(b, value, ptr.dtype.element_ty if not is_value(value) else None)
    shape = broadcast_shapes(ptr.shape, value.shape, mask.shape if is_value(mask) else ())
    ptr = broadcast_to(b, ptr, shape)
    elt = ptr.dtype.element_ty
    value = broadcast_to(b, cast(b, value, elt), shape)
    if mask is not None:
        mask = broadcast_to(b, to_bool(b, mask), shape)
    b.create("store", [ptr, value, mask], [], {"cache": cache or "", "eviction": eviction or ""})


MEMORY_SEMANTICS = ("acq_rel", "acquire", "release", "relaxed")
MEMORY_SCOPES = ("gpu", "cta", "sys")


def _sem_and_scope(what, sem, scope):
    sem, scope = sem or "acq_rel", scope or "gpu"
    if sem not in MEMORY_SEMANTICS:
        raise SemanticError(f"{what}: memory semantic {sem!r} is not supported; use one of {list(MEMORY_SEMANTICS)}")
    if scope not in MEMORY_SCOPES:
        raise SemanticError(f"{what}: memory scope {scope!r} is not supported; use one of {list(MEMORY_SCOPES)}")
    return sem, scope


def _check_atomic_element(kind, elt) -> None:
    """The element types a pointer atomic takes, as in Triton."""
    if elt in (T.int16, T.uint16) or elt.primitive_bitwidth < 16:
        raise SemanticError(f"tl.atomic_{kind} does not support {elt}: atomics need 32 or 64-bit elements "
                            "(fp16 and bf16: add and xchg only)")
    if kind in ("and", "or", "xor") and not elt.is_int():
        raise SemanticError(f"tl.atomic_{kind} needs an integer pointer, got {elt}")
    if elt in (T.float16, T.bfloat16) and kind not in ("add", "xchg"):
        raise SemanticError(f"tl.atomic_{kind} is not supported on {elt}")


def atomic_rmw(b, kind, ptr, val, mask=None, sem=None, scope=None, check_element=True):
    """`check_element=False`: the caller checked the element type against its own table (a tensor
    descriptor's atomics are TMA reductions, with min/max on fp16/bf16 and none on fp32)."""
    sem, scope = _sem_and_scope(f"tl.atomic_{kind}", sem, scope)
    if not _is_ptr(ptr):
        raise SemanticError(f"tl.atomic_{kind} expects a pointer, got {_describe(ptr)}")
    _check_writable(ptr)
    elt = ptr.dtype.element_ty
    val = to_tensor(b, val, elt if not is_value(val) else None)
    shape = broadcast_shapes(ptr.shape, val.shape, mask.shape if is_value(mask) else ())
    ptr = broadcast_to(b, ptr, shape)
    val = broadcast_to(b, cast(b, val, elt), shape)
    if mask is not None:
        mask = broadcast_to(b, to_bool(b, mask), shape)
    if check_element:
        _check_atomic_element(kind, elt)
    return b.value("atomic_rmw", [ptr, val, mask], val.type, kind=kind, sem=sem, scope=scope)


def atomic_cas(b, ptr, cmp, val, sem=None, scope=None):
    sem, scope = _sem_and_scope("tl.atomic_cas", sem, scope)
    if not _is_ptr(ptr):
        raise SemanticError(f"tl.atomic_cas expects a pointer, got {_describe(ptr)}")
    _check_writable(ptr)
    elt = ptr.dtype.element_ty
    cmp = to_tensor(b, cmp, elt if not is_value(cmp) else None)
    val = to_tensor(b, val, elt if not is_value(val) else None)
    shape = broadcast_shapes(ptr.shape, cmp.shape, val.shape)
    ptr = broadcast_to(b, ptr, shape)
    cmp = broadcast_to(b, cast(b, cmp, elt), shape)
    val = broadcast_to(b, cast(b, val, elt), shape)
    if elt.primitive_bitwidth not in (16, 32, 64):
        raise SemanticError(f"tl.atomic_cas needs a 16, 32 or 64-bit element type, got {elt}")
    return b.value("atomic_cas", [ptr, cmp, val], val.type, sem=sem, scope=scope)


# ---------------------------------------------------------------------------------------------
# Reductions, scans, dot

def _reduce_all(b, x):
    if len(x.shape) > 1:
        x = reshape(b, x, (x.type.numel,), can_reorder=True)
    return x, 0


def sum_dtype(elt: dtype, requested=None) -> dtype | None:
    if requested is not None:
        return requested
    if elt.is_int_signed() and elt.int_bitwidth < 32:
        return T.int32
    if elt.is_int_unsigned() and elt.int_bitwidth < 32:
        return T.uint32
    return None


def reduce(b, x, axis, kind, keep_dims=False, dtype=None, tie_break_left=True):
    x = to_tensor(b, x)
    if not x.is_block:
        x = splat(b, x, (1,))
    if axis is None:
        if keep_dims:   # over every axis, each kept with length 1 (as Triton)
            ones = (1,) * len(x.shape)
            return reshape(b, reduce(b, x, None, kind, False, dtype, tie_break_left), ones)
        x, axis = _reduce_all(b, x)
    rank = len(x.shape)
    if axis < 0:
        axis += rank
    if not 0 <= axis < rank:
        raise SemanticError(f"reduction axis {axis} out of range for a {rank}-D block")
    if kind in ("sum", "xor_sum"):
        to = sum_dtype(x.dtype, dtype)
        if to is not None:
            x = cast(b, x, to)
    elif x.dtype.is_bool():
        x = cast(b, x, T.int32)
    if kind == "xor_sum" and not x.dtype.is_int():
        raise SemanticError("xor_sum needs integers")
    shape = x.shape[:axis] + x.shape[axis + 1:]
    elt = T.int32 if kind in ("argmax", "argmin") else x.dtype
    out = b.value("reduce", [x], _with_shape(elt, shape), axis=axis, kind=kind, tie_break_left=bool(tie_break_left))
    if keep_dims:
        out = expand_dims(b, out, axis)
    return out


def scan(b, x, axis, kind, reverse=False):
    x = to_tensor(b, x)
    if not x.is_block:
        raise SemanticError("scans need a block")
    rank = len(x.shape)
    if axis < 0:
        axis += rank
    if not 0 <= axis < rank:
        raise SemanticError(f"scan axis {axis} out of range for a {rank}-D block")
    if kind in ("sum", "prod"):
        to = sum_dtype(x.dtype)
        if to is not None:
            x = cast(b, x, to)
    return b.value("scan", [x], x.type, axis=axis, kind=kind, reverse=bool(reverse))


def _hopper_or_later(target: str | None) -> bool:
    digits = re.match(r"sm_(\d+)", target or "")
    return digits is not None and int(digits.group(1)) >= 90


def dot(b, a, c, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None, out_dtype=T.float32):
    """`tl.dot` of two 2-D blocks, or of two N-D blocks batched over their leading dims. Dims under 16
    run in interpret mode (as in Triton's interpreter); the NVPTX backend refuses them."""
    # float8e4b15 operands are upcast to fp16 first (exact), as Triton does, and on Hopper and later
    # with its warning
    if _hopper_or_later(b.gpu_target) and any(is_value(x) and x.dtype.is_fp8e4b15() for x in (a, c)):
        warnings.warn("the use of fp8e4b15 is deprecated on Hopper and later architectures and can cause significant "
                      "slow down. It will be removed in a future triton release", stacklevel=2)
    a, c = (cast(b, x, T.float16) if is_value(x) and x.dtype.is_fp8e4b15() else x for x in (a, c))
    ranks = tuple(len(x.shape) if is_value(x) else None for x in (a, c))
    if ranks[0] is not None and ranks[0] == ranks[1] and ranks[0] > 3 and a.shape[:-2] == c.shape[:-2]:
        # [..., M, K] @ [..., K, N]: the leading dims are one batch dim (Triton batches over them all)
        lead = a.shape[:-2]
        batch = 1
        for d in lead:
            batch *= d
        flat = [reshape(b, x, (batch, *x.shape[-2:])) for x in (a, c)]
        if acc is not None:
            acc = to_tensor(b, acc)
            acc = reshape(b, acc, (batch, *acc.shape[-2:])) if len(acc.shape) == ranks[0] else acc
        out = _batched_dot(b, *flat, acc, input_precision, allow_tf32, max_num_imprecise_acc, out_dtype)
        return reshape(b, out, (*lead, *out.shape[-2:]))
    if ranks not in ((2, 2), (3, 3)):
        raise SemanticError(f"tl.dot needs two 2-D blocks, or two N-D blocks batched over their leading dims, got "
                            f"shapes {list(shape_of(getattr(a, 'type', None)))} and {list(shape_of(getattr(c, 'type', None)))}")
    if ranks == (3, 3):
        return _batched_dot(b, a, c, acc, input_precision, allow_tf32, max_num_imprecise_acc, out_dtype)
    (m, k), (k2, n) = a.shape, c.shape
    if k != k2:
        raise SemanticError(f"tl.dot: inner dimensions differ ({a.shape} @ {c.shape})")
    ad, cd = a.dtype, c.dtype
    if ad.is_fp8() and cd.is_fp8():
        # any two fp8 kinds multiply on the tensor cores (e4m3 × e5m2 too), as in Triton
        if max_num_imprecise_acc is not None and max_num_imprecise_acc > k:
            raise SemanticError(f"max_num_imprecise_acc ({max_num_imprecise_acc}) must be <= K ({k})")
    elif ad != cd:
        if ad.is_floating() and cd.is_floating():
            wide = computation_type(ad, False, cd, False, False)
            a, c = cast(b, a, wide), cast(b, c, wide)
        else:
            raise SemanticError(f"tl.dot operands must have the same type, got {ad} and {cd}")
    if a.dtype.is_int():
        out = T.int32
    elif a.dtype.is_fp64():
        out = T.float64
    else:
        out = out_dtype or T.float32
    if input_precision is None:
        if allow_tf32 is not None:
            input_precision = "tf32" if allow_tf32 else "ieee"
        else:
            input_precision = knobs.codegen.fp32_default
    input_precision = str(input_precision).lower()
    if input_precision not in ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6"):
        raise SemanticError("tl.dot: input_precision must be one of 'tf32', 'tf32x3', 'ieee', 'bf16x3', 'bf16x6', "
                            f"got {input_precision!r}")
    if not a.dtype.is_fp32():
        input_precision = "ieee"
    rt = block_type(out, (m, n))
    if acc is None:
        acc = const(b, 0, rt)
    else:
        acc = to_tensor(b, acc)
        if acc.shape != (m, n):
            raise SemanticError(f"tl.dot: accumulator shape {list(acc.shape)} must be {[m, n]}")
        if acc.dtype != out:
            if out_dtype is not None and acc.dtype.is_floating():
                rt = block_type(acc.dtype, (m, n))
            else:
                acc = cast(b, acc, out)
    return b.value("dot", [a, c, acc], rt, input_precision=input_precision,
                   max_num_imprecise_acc=max_num_imprecise_acc)


def _batched_dot(b, a, c, acc, input_precision, allow_tf32, max_num_imprecise_acc, out_dtype):
    """[B, M, K] @ [B, K, N]: one 2-D dot per batch element. The batch dim is moved last and halved
    by tl.split until single [M, K] tiles remain; the [M, N] results are joined back the same way.
    Every step is an op both the interpreter and the backend already have (a 2-D dot per batch
    element runs on the tensor cores like any other)."""
    if a.shape[0] != c.shape[0] or a.shape[2] != c.shape[1]:
        raise SemanticError(f"tl.dot: batched shapes do not match ({list(a.shape)} @ {list(c.shape)}: needs [B, M, K] @ [B, K, N])")
    if acc is not None:
        acc = to_tensor(b, acc)
        if acc.shape != (a.shape[0], a.shape[1], c.shape[2]):
            raise SemanticError(f"tl.dot: accumulator shape {list(acc.shape)} must be {[a.shape[0], a.shape[1], c.shape[2]]}")
    a_tiles, c_tiles = _batch_tiles(b, a), _batch_tiles(b, c)
    acc_tiles = _batch_tiles(b, acc) if acc is not None else [None] * len(a_tiles)
    outs = [dot(b, x, y, z, input_precision, allow_tf32, max_num_imprecise_acc, out_dtype)
            for x, y, z in zip(a_tiles, c_tiles, acc_tiles)]
    return _stack_batch(b, outs)


def _batch_tiles(b, x: ir.Value) -> list:
    """The B tiles x[0], …, x[B-1] of a [B, R, C] block."""
    return _last_dim_tiles(b, trans(b, x, (1, 2, 0)))


def _last_dim_tiles(b, x: ir.Value) -> list:
    """[R, C, L] → its L [R, C] slices: split into even and odd slices until one is left."""
    r, c, n = x.shape
    if n == 1:
        return [reshape(b, x, (r, c))]
    even, odd = split(b, reshape(b, x, (r, c, n // 2, 2)))
    tiles = [None] * n
    tiles[0::2], tiles[1::2] = _last_dim_tiles(b, even), _last_dim_tiles(b, odd)
    return tiles


def _stack_batch(b, tiles: list) -> ir.Value:
    """[R, C] tiles → the [B, R, C] block holding tile i at batch index i."""
    return trans(b, _stack_last_dim(b, tiles), (2, 0, 1))


def _stack_last_dim(b, tiles: list) -> ir.Value:
    """The inverse of _last_dim_tiles: joined even and odd slices are interleaved back."""
    if len(tiles) == 1:
        return expand_dims(b, tiles[0], 2)
    even, odd = _stack_last_dim(b, tiles[0::2]), _stack_last_dim(b, tiles[1::2])
    r, c, half = even.shape
    return reshape(b, join(b, even, odd), (r, c, 2 * half))


def _describe(x) -> str:
    if is_value(x):
        return f"a value of type {x.type}"
    return f"{type(unlift(x)).__name__} {x!r}"
