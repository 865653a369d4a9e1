"""Block pointers (`tl.make_block_ptr`, `tl.advance`) and device-side tensor descriptors.

Neither exists in the block IR. A block pointer is a front-end value made of scalar IR values (the
base pointer, each dim's shape, stride and offset) plus compile-time block shape and order; a load
or store through it is rewritten here into an ordinary load/store of a block of pointers
`base + Σ_d (offset_d + arange(block_d)) · stride_d`, masked by `0 ≤ offset_d + i < shape_d` on the
dims of `boundary_check` (Triton's RewriteTensorPointer pass does the same). Because the result is
plain pointer arithmetic on loop-carried scalar offsets, the backend's axis analysis, vectorization
and the matmul pipelining (cp.async / wgmma) see exactly what they see for hand-written pointers.

A tensor descriptor (`tl.make_tensor_descriptor`, or a host `TensorDescriptor` argument) is the
same thing without offsets: `desc.load(offsets)` builds a block pointer at `offsets` and loads
through it with every dim bounds-checked and zero padding, as a TMA load would. A host descriptor
that takes a CUtensorMap (`tmap`: sm_90, a box TMA can copy, see tensor_map.py) instead becomes the
ops `tma_load` / `tma_store` (operands: the map, then the offsets; the store's value last), which
the backend lowers to the bulk tensor copy engine (backend/tma.py).

Both are `Composite`s: the code generator carries their scalar parts through loops and ifs.
"""
from __future__ import annotations

from .. import tensor_map
from ..language import core as tl_core
from ..language import descriptor_type as DT
from ..language import dtypes as T
from ..language.core import constexpr
from ..language.dtypes import block_type, pointer_type
from . import semantic as S
from .semantic import SemanticError, is_value

_PADDINGS = ("", "zero", "nan")


class Composite:
    """A front-end value made of IR values (`parts`) and a compile-time structure (`structure`)."""

    def parts(self) -> list:
        raise NotImplementedError

    def structure(self) -> tuple:
        raise NotImplementedError

    def with_parts(self, parts: list) -> "Composite":
        raise NotImplementedError


def _ints(what: str, values, n: int | None = None) -> tuple:
    values = values.value if isinstance(values, constexpr) else values
    if not isinstance(values, (tuple, list)):
        values = (values,)
    out = []
    for v in values:
        v = v.value if isinstance(v, constexpr) else v
        if is_value(v) or not isinstance(v, int) or isinstance(v, bool):
            raise SemanticError(f"{what} must be a tuple of compile-time integers, got {values!r}")
        out.append(v)
    if n is not None and len(out) != n:
        raise SemanticError(f"{what} needs {n} entries (one per dim), got {len(out)}")
    return tuple(out)


def _scalars(b, what: str, values, ty, n: int) -> list:
    """Runtime (or constant) integer scalars, cast to `ty`."""
    values = values.value if isinstance(values, constexpr) else values
    if not isinstance(values, (tuple, list)):
        raise SemanticError(f"{what} must be a tuple with one entry per dim, got {values!r}")
    if len(values) != n:
        raise SemanticError(f"{what} needs {n} entries (one per dim), got {len(values)}")
    out = []
    for v in values:
        v = v.value if isinstance(v, constexpr) else v
        if is_value(v):
            if v.is_block:
                raise SemanticError(f"{what} must hold scalars, got a block of shape {list(v.shape)}")
            if not v.dtype.is_int():
                raise SemanticError(f"{what} must hold integers, got {v.dtype}")
        elif not isinstance(v, int) or isinstance(v, bool):
            raise SemanticError(f"{what} must hold integers, got {v!r}")
        out.append(S.cast(b, S.to_tensor(b, v, ty if not is_value(v) else None), ty))
    return out


def _block_shape(block_shape, n: int | None = None) -> tuple:
    shape = _ints("block_shape", block_shape, n)
    for s in shape:
        if s <= 0 or s & (s - 1):
            raise SemanticError(f"block_shape dims must be powers of two, got {list(shape)}")
    return shape


class BlockPointer(Composite):
    """`tl.make_block_ptr(...)`: a [block_shape] window at `offsets` into an N-D tensor."""

    def __init__(self, base, shape, strides, offsets, block_shape: tuple, order: tuple):
        self.base, self.shape, self.strides, self.offsets = base, list(shape), list(strides), list(offsets)
        self.block_shape, self.order = tuple(block_shape), tuple(order)

    @property
    def element_ty(self):
        return self.base.dtype.element_ty

    @property
    def type(self):
        return pointer_type(block_type(self.element_ty, self.block_shape))

    @property
    def dtype(self):
        return self.type

    def parts(self) -> list:
        return [self.base, *self.shape, *self.strides, *self.offsets]

    def structure(self) -> tuple:
        return ("block_ptr", self.block_shape, self.order)

    def with_parts(self, parts: list) -> "BlockPointer":
        n = len(self.block_shape)
        return BlockPointer(parts[0], parts[1:1 + n], parts[1 + n:1 + 2 * n], parts[1 + 2 * n:], self.block_shape, self.order)

    def __repr__(self) -> str:
        return f"block pointer to {self.element_ty}{list(self.block_shape)}"


def make_block_ptr(b, base, shape, strides, offsets, block_shape, order) -> BlockPointer:
    if not is_value(base) or base.is_block or not base.dtype.is_ptr():
        raise SemanticError(f"tl.make_block_ptr's base must be a scalar pointer, got {S._describe(base)}")
    if base.dtype.element_ty.is_ptr():
        raise SemanticError("tl.make_block_ptr's base must point to numbers, not to pointers")
    block_shape = _block_shape(block_shape)
    n = len(block_shape)
    order = _ints("order", order, n)
    if sorted(order) != list(range(n)):
        raise SemanticError(f"order must be a permutation of 0..{n - 1}, got {list(order)}")
    shape = _scalars(b, "shape", shape, T.int64, n)
    strides = _scalars(b, "strides", strides, T.int64, n)
    offsets = _scalars(b, "offsets", offsets, T.int32, n)
    return BlockPointer(base, shape, strides, offsets, block_shape, order)


def advance(b, ptr, offsets) -> BlockPointer:
    if not isinstance(ptr, BlockPointer):
        raise SemanticError(f"tl.advance needs a block pointer (tl.make_block_ptr), got {S._describe(ptr)}")
    deltas = _scalars(b, "tl.advance's offsets", offsets, T.int32, len(ptr.block_shape))
    new = [S.add(b, o, d) for o, d in zip(ptr.offsets, deltas)]
    return BlockPointer(ptr.base, ptr.shape, ptr.strides, new, ptr.block_shape, ptr.order)


def _boundary_dims(ptr: BlockPointer, boundary_check) -> tuple:
    dims = _ints("boundary_check", boundary_check) if boundary_check not in (None, ()) else ()
    for d in dims:
        if not 0 <= d < len(ptr.block_shape):
            raise SemanticError(f"boundary_check dim {d} is out of range for a {len(ptr.block_shape)}-D block pointer")
    return tuple(sorted(set(dims)))


def _pointers_and_mask(b, ptr: BlockPointer, dims: tuple):
    """The block of element pointers of `ptr`'s window, and the mask of its in-bounds elements."""
    rank = len(ptr.block_shape)
    address = None
    mask = None
    for d, size in enumerate(ptr.block_shape):
        idx = S.add(b, b.value("arange", [], block_type(T.int32, (size,)), start=0, end=size), ptr.offsets[d])
        for axis in range(rank):  # idx becomes [1, …, size, …, 1]
            if axis != d:
                idx = S.expand_dims(b, idx, axis)
        term = S.mul(b, S.cast(b, idx, T.int64), ptr.strides[d])
        address = term if address is None else S.add(b, address, term)
        if d in dims:
            inside = S.logical(b, "and", S.compare(b, "ge", idx, 0), S.compare(b, "lt", S.cast(b, idx, T.int64), ptr.shape[d]))
            mask = inside if mask is None else S.logical(b, "and", mask, inside)
    address = S.broadcast_to(b, address, ptr.block_shape)
    pointers = S.addptr(b, ptr.base, address)
    if mask is not None:
        mask = S.broadcast_to(b, mask, ptr.block_shape)
    return pointers, mask


def load(b, ptr: BlockPointer, mask, other, boundary_check, padding_option, cache, eviction, volatile):
    if mask is not None or other is not None:
        raise SemanticError("`mask` and `other` arguments cannot be specified for loading block pointers "
                            "(use boundary_check and padding_option)")
    padding_option = padding_option.value if isinstance(padding_option, constexpr) else padding_option
    if padding_option not in _PADDINGS:
        raise SemanticError(f"padding_option must be one of {list(_PADDINGS[1:])}, got {padding_option!r}")
    elt = ptr.element_ty
    if padding_option == "nan" and not elt.is_floating():
        raise SemanticError(f"padding_option='nan' is only supported for floating-point types, not {elt}")
    pointers, in_bounds = _pointers_and_mask(b, ptr, _boundary_dims(ptr, boundary_check))
    fill = None
    if in_bounds is not None:
        fill = float("nan") if padding_option == "nan" else 0
    return S.load(b, pointers, in_bounds, fill, cache, eviction, volatile)


def store(b, ptr: BlockPointer, value, mask, boundary_check, cache, eviction):
    if mask is not None:
        raise SemanticError("`mask` cannot be specified for storing through block pointers (use boundary_check)")
    if is_value(value) and value.is_block and value.shape != ptr.block_shape:
        value = S.broadcast_to(b, value, ptr.block_shape)  # raises on a shape that does not fit
    pointers, in_bounds = _pointers_and_mask(b, ptr, _boundary_dims(ptr, boundary_check))
    S.store(b, pointers, value, in_bounds, cache, eviction)


# -- tensor descriptors ---------------------------------------------------------------------------

class TensorDescriptor(Composite, tl_core.tensor_descriptor):
    """`tl.make_tensor_descriptor(base, shape, strides, block_shape)` (or a host descriptor argument)."""

    def __init__(self, base, shape, strides, block_shape: tuple, padding: str = "zero", tmap=None):
        self.base, self.shape, self.strides, self.block_shape = base, list(shape), list(strides), tuple(block_shape)
        self.padding, self.tmap = padding, tmap

    @property
    def dtype(self):
        return self.base.dtype.element_ty

    @property
    def block_type(self):
        return block_type(self.dtype, self.block_shape)

    def parts(self) -> list:
        return [self.base, *self.shape, *self.strides] + ([self.tmap] if self.tmap is not None else [])

    def structure(self) -> tuple:
        return ("tensor_descriptor", self.block_shape, self.padding, self.tmap is not None)

    def with_parts(self, parts: list) -> "TensorDescriptor":
        n = len(self.block_shape)
        tmap = parts[1 + 2 * n] if self.tmap is not None else None
        return TensorDescriptor(parts[0], parts[1:1 + n], parts[1 + n:1 + 2 * n], self.block_shape, self.padding, tmap)

    def window(self, b, offsets) -> BlockPointer:
        n = len(self.block_shape)
        offs = _scalars(b, "the descriptor's offsets", offsets, T.int32, n)
        return BlockPointer(self.base, self.shape, self.strides, offs, self.block_shape, tuple(range(n - 1, -1, -1)))

    def __repr__(self) -> str:
        return f"tensor descriptor of {self.dtype}{list(self.block_shape)}"


def make_tensor_descriptor(b, base, shape, strides, block_shape, padding: str = "zero") -> TensorDescriptor:
    if not is_value(base) or base.is_block or not base.dtype.is_ptr():
        raise SemanticError(f"tl.make_tensor_descriptor's base must be a scalar pointer, got {S._describe(base)}")
    block_shape = _block_shape(block_shape)
    n = len(block_shape)
    if not 1 <= n <= 5:
        raise SemanticError(f"tensor descriptors have 1 to 5 dims, got {n}")
    shape = _scalars(b, "shape", shape, T.int32, n)
    strides_in = strides.value if isinstance(strides, constexpr) else strides
    if isinstance(strides_in, (tuple, list)) and len(strides_in) == n:
        last = strides_in[-1]
        last = last.value if isinstance(last, constexpr) else last
        if not is_value(last) and last != 1:
            raise SemanticError(f"tensor descriptor: the last dim must be contiguous (stride 1), got stride {last}")
    strides = _scalars(b, "strides", strides, T.int64, n)
    elt = base.dtype.element_ty
    elt_bytes = elt.primitive_bitwidth // 8
    if block_shape[-1] * elt_bytes < 16:  # a TMA box's inner dim is at least 16 bytes (Triton's words)
        raise SemanticError(f"Descriptor block shape must have at least 16 bytes in the last dimension, but got "
                            f"{block_shape[-1]} * {elt_bytes} = {block_shape[-1] * elt_bytes} bytes")
    padding = padding.value if isinstance(padding, constexpr) else padding
    if padding not in ("zero", "nan"):
        raise SemanticError(f"tensor descriptors take padding_option='zero' or 'nan', got {padding!r}")
    if padding == "nan" and not elt.is_floating():
        raise SemanticError(f"Padding option `nan` is not supported for integer blocks (the descriptor holds {elt})")
    tmap = None
    if _tma_compatible(b, base, strides_in, block_shape, elt):
        if b.global_scratch is None:
            b.global_scratch = b.function_body.add_arg(pointer_type(T.int8), DT.GLOBAL_SCRATCH)
        tmap = b.value("make_tensor_map", [b.global_scratch, base, *shape, *strides], pointer_type(T.int8),
                       block=block_shape, padding=padding, slot=b.tensor_maps)
        b.tensor_maps += 1
    return TensorDescriptor(base, shape, strides, block_shape, padding, tmap)


def _tma_compatible(b, base, strides, block_shape, elt) -> bool:
    """A device-side descriptor goes through TMA when the target has it, the box fits
    (tensor_map.eligible) and the specialization proves what a tensor map needs: a 16-byte aligned
    base and strides of 16 bytes but the last, 1 (kernel arguments specialized on divisibility by
    16, or constants). Else it stays bounds-checked loads and stores, correct for any alignment."""
    es = elt.primitive_bitwidth // 8
    if not tensor_map.eligible(block_shape, es, b.tma_target):
        return False

    def divisibility(v) -> int:
        v = v.value if isinstance(v, constexpr) else v
        if isinstance(v, int) and not isinstance(v, bool):
            return v if v else 1 << 30
        return b.arg_divisibility.get(v.id, 1) if is_value(v) else 1

    strides = list(strides.value if isinstance(strides, constexpr) else strides)
    last = strides[-1].value if isinstance(strides[-1], constexpr) else strides[-1]
    return (divisibility(base) % 16 == 0 and not is_value(last) and last == 1
            and all(divisibility(s) * es % 16 == 0 for s in strides[:-1]))


def _tma_offsets(b, desc: TensorDescriptor, offsets) -> list:
    return _scalars(b, "the descriptor's offsets", offsets, T.int32, len(desc.block_shape))


def descriptor_load(b, desc: TensorDescriptor, offsets):
    if desc.tmap is not None:
        return b.value("tma_load", [desc.tmap, *_tma_offsets(b, desc, offsets)], desc.block_type,
                       padding=desc.padding)
    return load(b, desc.window(b, offsets), None, None, tuple(range(len(desc.block_shape))), desc.padding, "", "", False)


def descriptor_store(b, desc: TensorDescriptor, offsets, value):
    value = S.to_tensor(b, value, desc.dtype) if not is_value(value) else value
    if value.shape != desc.block_shape:
        raise SemanticError(f"the stored block has shape {list(value.shape)}, the descriptor's block shape is {list(desc.block_shape)}")
    if desc.tmap is not None:
        b.create("tma_store", [desc.tmap, *_tma_offsets(b, desc, offsets), S.cast(b, value, desc.dtype)], [], {})
        return
    store(b, desc.window(b, offsets), value, None, tuple(range(len(desc.block_shape))), "", "")


DESCRIPTOR_ATOMICS = ("atomic_add", "atomic_min", "atomic_max", "atomic_and", "atomic_or", "atomic_xor")

# The element types of sm_90's TMA reductions (cp.reduce.async.bulk.tensor), which a descriptor's
# atomics are in Triton: min/max on fp16/bf16 but not fp32, add on uint64 but not int64.
_INTS = (T.int32, T.uint32, T.int64, T.uint64)
DESCRIPTOR_ATOMIC_TYPES = {
    "add": (T.int32, T.uint32, T.uint64, T.float32, T.float16, T.bfloat16),
    "min": _INTS + (T.float16, T.bfloat16),
    "max": _INTS + (T.float16, T.bfloat16),
    "and": _INTS, "or": _INTS, "xor": _INTS,
}


def descriptor_atomic(b, desc: TensorDescriptor, kind: str, offsets, value) -> None:
    """`desc.atomic_add(offsets, value)` & co.: an elementwise atomic on the in-bounds elements of
    the block at `offsets` (Triton's TMA reduction; returns nothing)."""
    value = S.to_tensor(b, value, desc.dtype) if not is_value(value) else value
    if value.shape != desc.block_shape:
        raise SemanticError(f"the block has shape {list(value.shape)}, the descriptor's block shape is {list(desc.block_shape)}")
    op = kind[len("atomic_"):]
    if desc.dtype not in DESCRIPTOR_ATOMIC_TYPES[op]:
        names = ", ".join(str(t) for t in DESCRIPTOR_ATOMIC_TYPES[op])
        raise SemanticError(f"descriptor {kind} is not supported on {desc.dtype}: a tensor descriptor's atomics are "
                            f"TMA reductions, whose {op} takes {names}")
    pointers, in_bounds = _pointers_and_mask(b, desc.window(b, offsets), tuple(range(len(desc.block_shape))))
    S.atomic_rmw(b, op, pointers, value, in_bounds, "relaxed", "gpu", check_element=False)


# -- TMA gather / scatter: rows picked by a block of indices ---------------------------------------

def _row_window(b, desc: TensorDescriptor, what: str, x_offsets, y_offset):
    """`desc.gather(x_offsets, y_offset)`'s elements: rows `x_offsets` of the 2-D tensor, columns
    `y_offset + arange(block_shape[1])`; the pointers, the in-bounds mask and the block shape.
    The checks are Triton's (TMA gather4/scatter4's limits), so a kernel valid here is valid there."""
    if len(desc.block_shape) != 2:
        raise SemanticError(f"descriptor {what} needs a 2-D descriptor, got block shape {list(desc.block_shape)}")
    if desc.block_shape[0] != 1:
        raise SemanticError(f"descriptor {what}: the descriptor's block must have 1 row, got block shape "
                            f"{list(desc.block_shape)}")
    if not is_value(x_offsets) or not x_offsets.is_block or len(x_offsets.shape) != 1 or not x_offsets.dtype.is_int():
        raise SemanticError(f"descriptor {what}: x offsets must be a 1-D block of integers, got {S._describe(x_offsets)}")
    n_rows, n_cols = x_offsets.shape[0], desc.block_shape[1]
    if n_rows < 8:
        raise SemanticError(f"descriptor {what} must have at least 8 rows, but got {n_rows}")
    min_cols = 32 // desc.dtype.primitive_bitwidth * 8
    if n_cols < min_cols:
        raise SemanticError(f"descriptor {what} of {desc.dtype} must have at least {min_cols} columns, but got {n_cols}")
    (y,) = _scalars(b, f"descriptor {what}'s y offset", (y_offset,), T.int32, 1)
    rows = S.expand_dims(b, S.cast(b, x_offsets, T.int32), 1)
    cols = S.expand_dims(b, S.add(b, b.value("arange", [], block_type(T.int32, (n_cols,)), start=0, end=n_cols), y), 0)
    shape = (n_rows, n_cols)
    address = S.add(b, S.mul(b, S.cast(b, rows, T.int64), desc.strides[0]), S.mul(b, S.cast(b, cols, T.int64), desc.strides[1]))
    pointers = S.addptr(b, desc.base, S.broadcast_to(b, address, shape))
    inside = None
    for idx, extent in ((rows, desc.shape[0]), (cols, desc.shape[1])):
        ok = S.logical(b, "and", S.compare(b, "ge", idx, 0), S.compare(b, "lt", idx, extent))
        inside = ok if inside is None else S.logical(b, "and", inside, ok)
    return pointers, S.broadcast_to(b, inside, shape), shape


def descriptor_gather(b, desc: TensorDescriptor, x_offsets, y_offset):
    pointers, in_bounds, _ = _row_window(b, desc, "gather", x_offsets, y_offset)
    fill = float("nan") if desc.padding == "nan" else 0
    return S.load(b, pointers, in_bounds, fill, "", "", False)


def descriptor_scatter(b, desc: TensorDescriptor, value, x_offsets, y_offset) -> None:
    pointers, in_bounds, shape = _row_window(b, desc, "scatter", x_offsets, y_offset)
    value = S.to_tensor(b, value, desc.dtype) if not is_value(value) else value
    if value.shape != shape:
        raise SemanticError(f"descriptor scatter: the value has shape {list(value.shape)}, the rows and columns "
                            f"make {list(shape)}")
    S.store(b, pointers, S.cast(b, value, desc.dtype), in_bounds, "", "")
