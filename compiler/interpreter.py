"""The interpreter backend: runs block IR on the CPU over numpy, one program at a time.

    from compiler import interpreter
    interpreter.run(fn, grid=(4, 1, 1), args=[x, y, n])

`run` compiles the `ir.Function` once into a list of Python closures (cached per function object)
and executes it for every program id of the grid, in order (x fastest, then y, then z). Straight-line
kernels (no loops/ifs, atomics, print or assert) instead run a chunk of programs at once, every value
carrying a leading program axis (`BLOCKTUNE_INTERPRET_VECTORIZE=0` turns that off). Values are
numpy scalars/arrays: integers wrap at their bit width, fp16 is numpy float16, bf16 is held in
float32 and rounded to bf16 (round-to-nearest-even) after every op and on load/store, pointers are
int64 byte addresses into the buffers passed as arguments (numpy arrays or torch CPU tensors).

Memory: every array/tensor argument registers the whole allocation it lives in (the root numpy
array, or the torch storage), so views, strides and offsets work as on the GPU. A load/store/atomic
lane that is active (mask true, or no mask) must fall inside one of those allocations, naturally
aligned; otherwise an `IndexError` names the kernel source location. Masked-off lanes never touch
memory.
"""
from __future__ import annotations

import bisect
import ctypes
import math
import sys
import threading
import weakref

import numpy as np

from . import ir, knobs
from .language import dtypes as T
from .language.dtypes import block_type, pointer_type, scalar_of, shape_of

__all__ = ["run", "interpret_mode", "InterpreterError", "compile_function"]


def interpret_mode() -> bool:
    """True when `BLOCKTUNE_INTERPRET` or `TRITON_INTERPRET` is set to 1/true/yes/on (knobs.runtime.interpret)."""
    return knobs.runtime.interpret


class InterpreterError(RuntimeError):
    """The IR handed to the interpreter is malformed (a compiler bug), or it cannot run it."""


# ---------------------------------------------------------------------------------------------
# Numeric helpers

def _np(dt):
    """The numpy dtype holding values of scalar type `dt` (pointers: int64; bf16: float32)."""
    return np.dtype(np.int64) if isinstance(dt, pointer_type) else dt.np


def _mem_np(dt):
    """The numpy dtype of one element of type `dt` as stored in memory."""
    if isinstance(dt, pointer_type):
        return np.dtype(np.int64)
    if dt is T.bfloat16:
        return np.dtype(np.uint16)
    if dt is T.int1:
        return np.dtype(np.uint8)
    return dt.np


def bf16_round(x):
    """Round float32 values to the nearest bf16 (ties to even), kept in float32. NaN stays NaN."""
    a = np.asarray(x, dtype=np.float32)
    u = a.view(np.uint32)
    r = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
    r = np.where(np.isnan(a), u | np.uint32(0x00400000), r).astype(np.uint32)
    out = r.view(np.float32)
    return out if out.shape else out[()]


def bf16_to_bits(x):
    """float32 values (already bf16-representable, or not: they are rounded) → uint16 bits."""
    r = np.asarray(bf16_round(x), dtype=np.float32)
    return (r.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def bits_to_bf16(u):
    return (np.asarray(u).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _tf32_round(x):
    """Round float32 to tf32 (10 mantissa bits), to nearest with ties away, as cvt.rna.tf32.f32."""
    a = np.ascontiguousarray(x, dtype=np.float32)
    u = a.view(np.uint32)
    r = ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).astype(np.uint32)
    r = np.where(np.isfinite(a), r, u).astype(np.uint32)
    return r.view(np.float32)


def _scalar_from_py(value, dt):
    """A Python/numpy number as a numpy scalar of type `dt` (ints wrap to the bit width)."""
    if isinstance(dt, pointer_type):
        return np.int64(_wrap_int(int(value), 64, True))
    if dt.is_bool():
        return np.bool_(bool(value))
    if dt.is_int():
        return dt.np.type(_wrap_int(int(value), dt.primitive_bitwidth, dt.is_int_signed()))
    if dt.is_floating():
        if dt is T.bfloat16:
            return bf16_round(np.float32(float(value)))
        if dt in (T.float8e4nv, T.float8e5):
            raise InterpreterError(f"the interpreter does not support {dt} values")
        return dt.np.type(float(value))
    raise InterpreterError(f"cannot make a constant of type {dt}")


def _wrap_int(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    if signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _float_to_int(x, dst):
    """Truncate toward zero, saturating at the range of `dst`; NaN → 0 (as cvt.rzi on the GPU)."""
    info = np.iinfo(dst.np)
    y = np.trunc(np.asarray(x, dtype=np.float64))
    nan = np.isnan(y)
    lo, hi = float(info.min), float(info.max)
    out = np.where(nan, 0.0, np.clip(y, lo, hi))
    res = np.where(out >= 2.0 ** (dst.primitive_bitwidth - (1 if dst.is_int_signed() else 0)),
                   0, out).astype(dst.np)
    if dst.primitive_bitwidth == 64:  # float(2**63-1) rounds up to 2**63: saturate explicitly
        res = np.where(out >= 2.0 ** (63 if dst.is_int_signed() else 64), info.max, res).astype(dst.np)
    return res if res.shape else res[()]


def cast_value(x, src, dst):
    """Numeric conversion with the IR's `cast` semantics."""
    if src == dst:
        return x
    if isinstance(src, pointer_type) or isinstance(dst, pointer_type):
        if isinstance(dst, pointer_type):
            return np.asarray(x).astype(np.int64)[()] if np.ndim(x) == 0 else np.asarray(x).astype(np.int64)
        if dst.is_bool():
            return np.not_equal(x, 0)
        return np.asarray(x).astype(dst.np) if np.ndim(x) else np.asarray(x).astype(dst.np)[()]
    if dst.is_bool():
        return np.not_equal(x, 0)
    if src in (T.float8e4nv, T.float8e5) or dst in (T.float8e4nv, T.float8e5):
        raise InterpreterError(f"the interpreter does not support casts between {src} and {dst}")
    if dst.is_floating():
        if dst is T.bfloat16:
            return bf16_round(np.asarray(x).astype(np.float32))
        y = np.asarray(x).astype(dst.np)
        return y if y.shape else y[()]
    # dst is an integer
    if src.is_floating():
        return _float_to_int(x, dst)
    y = np.asarray(x).astype(dst.np)  # int → int wraps; sign- or zero-extends by the source's sign
    return y if y.shape else y[()]


def bitcast_value(x, src, dst):
    if src == dst:
        return x
    sb = 64 if isinstance(src, pointer_type) else src.primitive_bitwidth
    db = 64 if isinstance(dst, pointer_type) else dst.primitive_bitwidth
    if sb != db:
        raise InterpreterError(f"bitcast between types of different widths: {src} → {dst}")
    a = np.ascontiguousarray(x)
    if src is T.bfloat16:
        a = bf16_to_bits(a)
    else:
        a = a.astype(_mem_np(src), copy=False)
    if dst is T.bfloat16:
        y = bits_to_bf16(a.view(np.uint16))
    elif dst is T.int1:
        y = a.view(np.uint8) != 0
    else:
        y = a.view(_np(dst))
    return y if y.shape else y[()]


def _trunc_div(a, b):
    """C integer division (truncates toward zero). Division by zero gives all ones (-1)."""
    a = np.asarray(a)
    b = np.asarray(b)
    zero = b == 0
    bs = np.where(zero, 1, b).astype(b.dtype)
    r = np.fmod(a, bs)
    q = ((a - r) // bs).astype(a.dtype)
    q = np.where(zero, np.array(-1).astype(a.dtype), q).astype(a.dtype)
    return q if q.shape else q[()]


def _int_rem(a, b):
    a = np.asarray(a)
    b = np.asarray(b)
    zero = b == 0
    r = np.fmod(a, np.where(zero, 1, b).astype(b.dtype))
    r = np.where(zero, a, r).astype(a.dtype)
    return r if r.shape else r[()]


def _umulhi(a, b, dt):
    bits = dt.primitive_bitwidth
    if bits <= 32:
        wide = np.int64 if dt.is_int_signed() else np.uint64
        r = ((np.asarray(a).astype(wide) * np.asarray(b).astype(wide)) >> bits).astype(dt.np)
    else:
        fa = np.asarray(a).ravel().tolist()
        fb = np.broadcast_to(np.asarray(b), np.shape(a)).ravel().tolist()
        r = np.array([_wrap_int((x * y) >> 64, 64, dt.is_int_signed()) for x, y in zip(fa, fb)],
                     dtype=dt.np).reshape(np.shape(a))
    return r if r.shape else r[()]


def _erf(x):
    a = np.asarray(x)
    try:
        import torch  # noqa: PLC0415 - torch is optional (and slow to import): only when erf is asked for
        r = torch.special.erf(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))).numpy()
    except ImportError:  # pragma: no cover - torch is optional
        r = np.vectorize(math.erf, otypes=[np.float64])(a.astype(np.float64))
    r = r.astype(a.dtype)
    return r if r.shape else r[()]


def _fma(a, b, c, dt):
    if dt is T.float64:
        return np.add(np.multiply(a, b), c)
    r = np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64) + np.asarray(c, dtype=np.float64)
    r = r.astype(_np(dt))
    return r if r.shape else r[()]


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def _float_binary(name):
    return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "fdiv": np.true_divide,
            "rem": np.fmod, "maximum": np.fmax, "minimum": np.fmin,
            "maximum_nan": np.maximum, "minimum_nan": np.minimum}.get(name)


def _int_binary(name, dt):
    if dt.is_bool():
        table = {"add": np.bitwise_xor, "sub": np.bitwise_xor, "mul": np.bitwise_and,
                 "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
                 "maximum": np.bitwise_or, "minimum": np.bitwise_and,
                 "maximum_nan": np.bitwise_or, "minimum_nan": np.bitwise_and,
                 "div": lambda a, b: a, "rem": lambda a, b: np.bitwise_and(a, False)}
        return table.get(name)
    table = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _trunc_div, "rem": _int_rem,
             "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
             "maximum": np.maximum, "minimum": np.minimum, "maximum_nan": np.maximum,
             "minimum_nan": np.minimum}
    if name in table:
        return table[name]
    bits = dt.primitive_bitwidth
    if name == "shl":
        def shl(a, b):
            return np.where((np.asarray(b) >= bits) | (np.asarray(b) < 0), 0, np.left_shift(a, b)).astype(dt.np)[()] \
                if np.ndim(a) == 0 and np.ndim(b) == 0 else \
                np.where((np.asarray(b) >= bits) | (np.asarray(b) < 0), 0, np.left_shift(a, b)).astype(dt.np)
        return shl
    if name == "shr":
        fill_signed = dt.is_int_signed()

        def shr(a, b):
            bb = np.asarray(b)
            big = (bb >= bits) | (bb < 0)
            r = np.right_shift(a, np.where(big, 0, bb).astype(bb.dtype))
            if fill_signed:
                r = np.where(big, np.where(np.asarray(a) < 0, -1, 0), r).astype(dt.np)
            else:
                r = np.where(big, 0, r).astype(dt.np)
            return r if r.shape else r[()]
        return shr
    return None


_UNARY_FLOAT = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "log": np.log,
                "log2": np.log2, "sqrt": np.sqrt, "rsqrt": _rsqrt, "sin": np.sin, "cos": np.cos,
                "floor": np.floor, "ceil": np.ceil, "erf": _erf, "tanh": np.tanh}
_UNARY_INT = {"neg": np.negative, "not": np.invert, "abs": np.abs}
_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal}


# ---------------------------------------------------------------------------------------------
# Memory: the buffers passed as arguments

class _Buffer:
    __slots__ = ("lo", "hi", "raw", "owner", "names", "views")

    def __init__(self, lo, hi, raw, owner, name):
        self.lo, self.hi, self.raw, self.owner, self.names = lo, hi, raw, owner, [name]
        self.views = {}

    def view(self, npdt):
        """A typed view whose element 0 sits at the first naturally aligned address ≥ lo."""
        v = self.views.get(npdt)
        if v is None:
            size = npdt.itemsize
            start = (-self.lo) % size
            n = (self.hi - self.lo - start) // size
            v = (self.raw[start:start + n * size].view(npdt), self.lo + start)
            self.views[npdt] = v
        return v

    def describe(self) -> str:
        return f"{'/'.join(self.names)} [0x{self.lo:x}, 0x{self.hi:x}) ({self.hi - self.lo} bytes)"


def _buffer_of(obj, name):
    """(lo, hi, raw uint8 array, owner) of the whole allocation `obj` lives in, or None."""
    if isinstance(obj, np.ndarray):
        root = obj
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.nbytes == 0:
            return None, obj.ctypes.data
        lo, hi = np.lib.array_utils.byte_bounds(root) if hasattr(np.lib, "array_utils") else np.byte_bounds(root)
        ptr = obj.ctypes.data
        owner = root
    elif hasattr(obj, "data_ptr") and hasattr(obj, "untyped_storage"):  # torch.Tensor
        if getattr(obj, "device", None) is not None and obj.device.type != "cpu":
            raise InterpreterError(f"argument {name!r} is a {obj.device.type} tensor; interpret mode runs "
                                   "on the CPU and needs CPU tensors or numpy arrays")
        st = obj.untyped_storage()
        lo, hi = st.data_ptr(), st.data_ptr() + st.nbytes()
        ptr = obj.data_ptr()
        owner = obj
        if hi == lo:
            return None, ptr
    else:
        return None
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * (hi - lo)).from_address(lo)) if hi > lo else None
    return (lo, hi, raw, owner), ptr


class _Memory:
    def __init__(self):
        self.buffers: list[_Buffer] = []
        self.los: list[int] = []
        self.vec_pids = None

    def add(self, lo, hi, raw, owner, name):
        """Register [lo, hi); allocations that overlap (views of one buffer) merge into one."""
        overlapping = [b for b in self.buffers if b.lo < hi and lo < b.hi]
        if not overlapping:
            self.buffers.append(_Buffer(lo, hi, raw, owner, name))
            self._index()
            return
        ulo = min([lo] + [b.lo for b in overlapping])
        uhi = max([hi] + [b.hi for b in overlapping])
        names = [n for b in overlapping for n in b.names] + [name]
        owners = [owner] + [b.owner for b in overlapping]
        if (ulo, uhi) == (lo, hi):
            uraw = raw
        else:
            same = [b for b in overlapping if (b.lo, b.hi) == (ulo, uhi)]
            uraw = same[0].raw if same else np.ctypeslib.as_array((ctypes.c_uint8 * (uhi - ulo)).from_address(ulo))
        merged = _Buffer(ulo, uhi, uraw, owners, names[0])
        merged.names = names
        self.buffers = [b for b in self.buffers if b not in overlapping] + [merged]
        self._index()

    def _index(self):
        self.buffers.sort(key=lambda b: b.lo)
        self.los = [b.lo for b in self.buffers]

    def _find(self, addr):
        i = bisect.bisect_right(self.los, addr) - 1
        if i >= 0 and addr < self.buffers[i].hi:
            return self.buffers[i]
        return None

    def locate(self, addrs, size, what, loc, lanes, shape):
        """Group active addresses by buffer: a list of (buffer, positions in addrs or None, byte addrs)."""
        if addrs.size == 0:
            return []
        if size > 1 and (addrs & (size - 1)).any():
            bad = int(np.flatnonzero(addrs & (size - 1))[0])
            raise IndexError(f"{loc}: misaligned {what} of a {size}-byte element at address "
                             f"0x{int(addrs[bad]) & (2**64 - 1):x}{self._lane(lanes, bad, shape)}")
        a0 = int(addrs.min())
        a1 = int(addrs.max())
        b = self._find(a0)
        if b is not None and a1 + size <= b.hi:
            return [(b, None, addrs)]
        out = []
        todo = np.arange(addrs.size)
        while todo.size:
            first = int(addrs[todo[0]])
            b = self._find(first)
            if b is None or first + size > b.hi:
                self._oob(first, what, loc, lanes, int(todo[0]), shape)
            inside = (addrs[todo] >= b.lo) & (addrs[todo] + size <= b.hi)
            out.append((b, todo[inside], addrs[todo[inside]]))
            todo = todo[~inside]
        return out

    def _lane(self, lanes, pos, shape):
        if not shape:
            return ""
        flat = int(lanes[pos]) if lanes is not None else pos
        idx = tuple(int(i) for i in np.unravel_index(flat, shape))
        if self.vec_pids is not None:  # a vectorized run: the first index is the program
            q = idx[0]
            pid = tuple(int(a[q]) for a in self.vec_pids)
            return f" (program {pid}, lane {idx[1:]})"
        return f" (lane {idx})"

    def _oob(self, addr, what, loc, lanes, pos, shape):
        bufs = "; ".join(b.describe() for b in self.buffers) or "none"
        raise IndexError(f"{loc}: out-of-bounds {what} at address 0x{addr & (2**64 - 1):x}"
                         f"{self._lane(lanes, pos, shape)}: not inside any buffer argument "
                         f"(buffers: {bufs})")

    # -- typed access ------------------------------------------------------------------------
    def gather(self, addrs, dt, what, loc, lanes, shape):
        mdt = _mem_np(dt)
        size = mdt.itemsize
        out = np.empty(addrs.shape, dtype=mdt)
        for b, pos, a in self.locate(addrs, size, what, loc, lanes, shape):
            view, base = b.view(mdt)
            vals = view[(a - base) // size]
            if pos is None:
                out = vals
            else:
                out[pos] = vals
        return _from_mem(out, dt)

    def scatter(self, addrs, vals, dt, what, loc, lanes, shape):
        mdt = _mem_np(dt)
        size = mdt.itemsize
        raw = _to_mem(vals, dt)
        for b, pos, a in self.locate(addrs, size, what, loc, lanes, shape):
            view, base = b.view(mdt)
            if pos is None:
                view[(a - base) // size] = raw
            else:
                view[(a - base) // size] = raw[pos]

    def element_refs(self, addrs, dt, what, loc, lanes, shape):
        """(typed view, index) per active address, for sequential atomics."""
        mdt = _mem_np(dt)
        size = mdt.itemsize
        refs = [None] * addrs.size
        for b, pos, a in self.locate(addrs, size, what, loc, lanes, shape):
            view, base = b.view(mdt)
            idx = (a - base) // size
            positions = range(addrs.size) if pos is None else pos.tolist()
            for p, i in zip(positions, idx.tolist()):
                refs[p] = (view, i)
        return refs


def _from_mem(raw, dt):
    if dt is T.bfloat16:
        return bits_to_bf16(raw)
    if dt is T.int1:
        return raw != 0
    return raw


def _to_mem(vals, dt):
    if dt is T.bfloat16:
        return bf16_to_bits(vals)
    if dt is T.int1:
        return np.asarray(vals).astype(np.uint8)
    return np.asarray(vals, dtype=_mem_np(dt))


# ---------------------------------------------------------------------------------------------
# Compilation of IR into closures

class _State:
    """Per-launch state reachable from every closure through env[0]."""
    __slots__ = ("pid", "grid", "mem", "P", "nprog")


class _Return(Exception):
    pass


class _CompiledBlock:
    __slots__ = ("arg_slots", "fns", "term", "term_slots")

    def __init__(self, arg_slots, fns, term, term_slots):
        self.arg_slots, self.fns, self.term, self.term_slots = arg_slots, fns, term, term_slots


def _run_block(blk: _CompiledBlock, env):
    for f in blk.fns:
        f(env)
    return [env[s] for s in blk.term_slots]


class Program:
    """A compiled `ir.Function`: call `.launch(grid, args)`. Runs the programs one by one."""

    BATCH = 0  # 1 in _VecProgram: values carry a leading program axis

    def __init__(self, fn: ir.Function):
        self.fn = fn
        self.slots: dict[int, int] = {}
        self.nslots = 1  # env[0] is the _State
        self.body = self._block(fn.body)
        self.arg_slots = self.body.arg_slots

    # -- slots ---------------------------------------------------------------------------------
    def _slot(self, v: ir.Value | None):
        if v is None:
            return None
        s = self.slots.get(v.id)
        if s is None:
            s = self.slots[v.id] = self.nslots
            self.nslots += 1
        return s

    def _block(self, block: ir.Block) -> _CompiledBlock:
        arg_slots = [self._slot(a) for a in block.args]
        fns = []
        term, term_slots = None, []
        for op in block.ops:
            if op.name in ir.TERMINATORS:
                term = op.name
                term_slots = [self._slot(v) for v in op.operands]
                if op.name == "return":
                    fns.append(_raise_return)
                break
            f = self._op(op)
            if f is not None:
                fns.append(f)
        return _CompiledBlock(arg_slots, fns, term, term_slots)

    # -- ops -------------------------------------------------------------------------------------
    def _op(self, op: ir.Op):
        name = op.name
        method = getattr(self, "_op_" + name, None)
        if method is None:
            if name in ir.BINARY_OPS:
                method = self._binary
            elif name in ir.UNARY_OPS:
                method = self._unary
            else:
                raise InterpreterError(f"{op.loc}: the interpreter does not know the op {name!r}")
        try:
            f = method(op)
        except InterpreterError:
            raise
        except Exception as e:  # malformed op: say which
            raise InterpreterError(f"{op.loc}: cannot interpret {name}: {e}") from e
        if f is None or not op.results:
            return f
        return self._checked(op, f)

    def _checked(self, op, f):
        """Wrap f so that every result has the shape and numpy dtype its IR type says."""
        checks = []
        for r in op.results:
            checks.append((self._slot(r), shape_of(r.type), _np(scalar_of(r.type)), r.type))
        if len(checks) != 1:
            return f
        s, shape, npdt, ty = checks[0]

        def g(env):
            f(env)
            v = env[s]
            if v.shape != shape or v.dtype != npdt:
                if v.shape != shape:
                    raise InterpreterError(f"{op.loc}: {op.name} produced shape {v.shape}, its IR type says {ty}")
                env[s] = v.astype(npdt)
                if env[s].dtype != npdt:
                    raise InterpreterError(f"{op.loc}: {op.name} produced {v.dtype}, its IR type says {ty}")
        # the check is cheap; keep it on: a mismatch is a compiler bug worth reporting loudly
        return g

    def _rs(self, op):
        return self._slot(op.result)

    def _op_const(self, op):
        ty = op.result.type
        v = _scalar_from_py(op.attrs["value"], scalar_of(ty))
        if isinstance(ty, block_type):
            v = np.full(ty.shape, v, dtype=v.dtype)
            v.flags.writeable = False
        s = self._rs(op)

        def f(env):
            env[s] = v
        return f

    def _op_arange(self, op):
        v = np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)
        v.flags.writeable = False
        s = self._rs(op)

        def f(env):
            env[s] = v
        return f

    def _op_program_id(self, op):
        axis, s = int(op.attrs["axis"]), self._rs(op)

        def f(env):
            env[s] = env[0].pid[axis]
        return f

    def _op_num_programs(self, op):
        axis, s = int(op.attrs["axis"]), self._rs(op)

        def f(env):
            env[s] = env[0].grid[axis]
        return f

    def _op_splat(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        shape, npdt = op.result.type.shape, _np(op.result.dtype)

        def f(env):
            env[s] = np.full(shape, env[x], dtype=npdt)
        return f

    def _op_broadcast(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        shape = op.result.type.shape

        def f(env):
            env[s] = np.broadcast_to(env[x], shape)
        return f

    def _op_expand_dims(self, op):
        x, s, axis = self._slot(op.operands[0]), self._rs(op), int(op.attrs["axis"]) + self.BATCH

        def f(env):
            env[s] = np.expand_dims(env[x], axis)
        return f

    def _op_reshape(self, op):
        x, s, shape = self._slot(op.operands[0]), self._rs(op), shape_of(op.result.type)

        def f(env):
            env[s] = np.reshape(env[x], shape)
        return f

    def _op_trans(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        perm = op.attrs.get("perm")
        perm = tuple(perm) if perm is not None else tuple(reversed(range(len(op.operands[0].shape))))
        if self.BATCH:
            perm = (0,) + tuple(p + 1 for p in perm)

        def f(env):
            env[s] = np.transpose(env[x], perm)
        return f

    def _op_cast(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        src, dst = op.operands[0].dtype, op.result.dtype

        def f(env):
            env[s] = cast_value(env[x], src, dst)
        return f

    def _op_bitcast(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        src, dst = op.operands[0].dtype, op.result.dtype

        def f(env):
            env[s] = bitcast_value(env[x], src, dst)
        return f

    def _binary(self, op):
        a, b, s = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op)
        dt = op.operands[0].dtype
        if dt.is_floating():
            fn = _float_binary(op.name)
        elif isinstance(dt, pointer_type):
            fn = {"add": np.add, "sub": np.subtract}.get(op.name)
        else:
            fn = _int_binary(op.name, dt)
        if fn is None:
            raise InterpreterError(f"{op.loc}: {op.name} is not defined on {dt}")
        if dt is T.bfloat16:
            def f(env):
                env[s] = bf16_round(fn(env[a], env[b]))
        else:
            def f(env):
                env[s] = fn(env[a], env[b])
        return f

    def _op_cmp(self, op):
        a, b, s = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op)
        fn = _CMP[op.attrs["pred"]]

        def f(env):
            env[s] = fn(env[a], env[b])
        return f

    def _unary(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        dt = op.operands[0].dtype
        if dt.is_floating():
            fn = _UNARY_FLOAT.get(op.name)
        else:
            fn = _UNARY_INT.get(op.name)
            if dt.is_bool() and op.name == "neg":
                fn = lambda v: v  # noqa: E731  (-x == x in one bit)
            if dt.is_bool() and op.name == "not":
                fn = np.logical_not
        if fn is None:
            raise InterpreterError(f"{op.loc}: {op.name} is not defined on {dt}")
        if dt is T.bfloat16:
            def f(env):
                env[s] = bf16_round(fn(env[x]))
        elif dt is T.float16 and op.name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos",
                                             "erf", "tanh"):
            def f(env):  # computed in fp32 and rounded once, as the GPU does for fp16 math
                env[s] = fn(np.float32(1) * env[x]).astype(np.float16)
        else:
            def f(env):
                env[s] = fn(env[x])
        return f

    def _op_fma(self, op):
        a, b, c = (self._slot(v) for v in op.operands)
        s, dt = self._rs(op), op.result.dtype
        if dt.is_int():
            def f(env):
                env[s] = env[a] * env[b] + env[c]
        elif dt is T.bfloat16:
            def f(env):
                env[s] = bf16_round(_fma(env[a], env[b], env[c], T.float32))
        else:
            def f(env):
                env[s] = _fma(env[a], env[b], env[c], dt)
        return f

    def _op_umulhi(self, op):
        a, b, s, dt = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op), op.result.dtype

        def f(env):
            env[s] = _umulhi(env[a], env[b], dt)
        return f

    def _op_select(self, op):
        c, a, b = (self._slot(v) for v in op.operands)
        s = self._rs(op)

        def f(env):
            r = np.where(env[c], env[a], env[b])
            env[s] = r if r.shape else r[()]
        return f

    def _op_addptr(self, op):
        p, o, s = self._slot(op.operands[0]), self._slot(op.operands[1]), self._rs(op)
        elt = op.operands[0].dtype.element_ty
        size = np.int64(8 if isinstance(elt, pointer_type) else _mem_np(elt).itemsize)

        def f(env):
            env[s] = env[p] + env[o].astype(np.int64) * size
        return f

    def _op_assume(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)

        def f(env):
            env[s] = env[x]
        return f

    def _op_barrier(self, op):
        return None

    # -- memory ----------------------------------------------------------------------------------
    def _op_load(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, m, o = (self._slot(v) for v in ops[:3])
        s = self._rs(op)
        dt = op.result.dtype
        npdt = _np(dt)
        loc = op.loc
        shape = shape_of(op.result.type)

        def f(env):
            mem = env[0].mem
            ptrs = env[p]
            if not shape:  # scalar
                if m is not None and not env[m]:
                    env[s] = env[o] if o is not None else npdt.type(0)
                    return
                env[s] = mem.gather(np.array([ptrs], dtype=np.int64), dt, "load", loc, None, ())[0]
                return
            flat = np.ravel(ptrs)
            if m is None:
                env[s] = mem.gather(flat, dt, "load", loc, None, shape).reshape(shape)
                return
            mask = np.ravel(env[m])
            if mask.all():
                env[s] = mem.gather(flat, dt, "load", loc, None, shape).reshape(shape)
                return
            if o is None:
                out = np.zeros(flat.size, dtype=npdt)
            else:
                out = np.array(np.broadcast_to(env[o], shape), dtype=npdt).reshape(-1)
            lanes = np.flatnonzero(mask)
            if lanes.size:
                out[lanes] = mem.gather(flat[lanes], dt, "load", loc, lanes, shape)
            env[s] = out.reshape(shape)
        return f

    def _op_store(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, v, m = (self._slot(x) for x in ops[:3])
        dt = op.operands[0].dtype.element_ty
        loc = op.loc
        shape = shape_of(op.operands[0].type)

        def f(env):
            mem = env[0].mem
            ptrs = env[p]
            if not shape:
                if m is not None and not env[m]:
                    return
                mem.scatter(np.array([ptrs], dtype=np.int64), np.array([env[v]]), dt, "store", loc, None, ())
                return
            flat = np.ravel(ptrs)
            vals = np.ravel(np.broadcast_to(env[v], shape))
            if m is None:
                mem.scatter(flat, vals, dt, "store", loc, None, shape)
                return
            mask = np.ravel(env[m])
            if mask.all():
                mem.scatter(flat, vals, dt, "store", loc, None, shape)
                return
            lanes = np.flatnonzero(mask)
            if lanes.size:
                mem.scatter(flat[lanes], vals[lanes], dt, "store", loc, lanes, shape)
        return f

    def _atomic(self, op, p, vals_slots, m, combine, what):
        """Shared driver: combine(old, *vals) → new, element by element in lane order."""
        s = self._rs(op)
        dt = op.operands[0].dtype.element_ty
        npdt = _np(dt)
        loc = op.loc
        shape = shape_of(op.result.type)

        def f(env):
            mem = env[0].mem
            ptrs = np.ravel(np.asarray(env[p], dtype=np.int64))
            vals = [np.ravel(np.broadcast_to(env[v], shape)) for v in vals_slots]
            out = np.zeros(ptrs.size, dtype=npdt)
            if m is not None:
                mask = np.ravel(np.broadcast_to(env[m], shape))
                lanes = np.flatnonzero(mask)
            else:
                lanes = np.arange(ptrs.size)
            if lanes.size:
                addrs = ptrs[lanes]
                refs = mem.element_refs(addrs, dt, what, loc, lanes, shape)
                lane_vals = [v[lanes] for v in vals]
                if np.unique(addrs).size == addrs.size:  # no two lanes hit one address: vectorize
                    groups = {}
                    for j, (view, i) in enumerate(refs):
                        groups.setdefault(id(view), (view, [], []))
                        groups[id(view)][1].append(j)
                        groups[id(view)][2].append(i)
                    for view, js, idx in groups.values():
                        js, idx = np.array(js), np.array(idx)
                        old = _from_mem(view[idx], dt)
                        new = combine(old, *[lv[js] for lv in lane_vals])
                        view[idx] = _to_mem(new, dt)
                        out[lanes[js]] = old
                else:
                    for j, (view, i) in enumerate(refs):
                        old = _from_mem(view[i:i + 1].copy(), dt)
                        new = combine(old, *[lv[j:j + 1] for lv in lane_vals])
                        view[i:i + 1] = _to_mem(new, dt)
                        out[lanes[j]] = old[0]
            env[s] = out.reshape(shape) if shape else out[0]
        return f

    def _op_atomic_rmw(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, v, m = (self._slot(x) for x in ops[:3])
        dt = op.operands[0].dtype.element_ty
        kind = op.attrs["kind"]
        if dt.is_floating():
            fn = {"add": np.add, "max": np.maximum, "min": np.minimum, "xchg": lambda a, b: b}.get(kind)
        else:
            fn = {"add": np.add, "max": np.maximum, "min": np.minimum, "xchg": lambda a, b: b,
                  "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}.get(kind)
            if dt.is_bool() and kind == "add":
                fn = np.bitwise_xor
        if fn is None:
            raise InterpreterError(f"{op.loc}: atomic {kind} is not defined on {dt}")
        if dt is T.bfloat16:
            base = fn
            fn = lambda a, b: bf16_round(base(a, b))  # noqa: E731
        return self._atomic(op, p, [v], m, fn, f"atomic_{kind}")

    def _op_atomic_cas(self, op):
        ops = list(op.operands) + [None] * (4 - len(op.operands))
        p, c, v, m = (self._slot(x) for x in ops[:4])
        dt = op.operands[0].dtype.element_ty
        if dt.is_floating():  # compare-and-swap compares bits
            def eq(a, b):
                return _to_mem(a, dt).view(_uint_of(dt)) == _to_mem(b, dt).view(_uint_of(dt))
        else:
            eq = np.equal

        def fn(old, cmp, val):
            return np.where(eq(old, cmp), val, old)
        return self._atomic(op, p, [c, v], m, fn, "atomic_cas")

    # -- reductions, scans, dot ---------------------------------------------------------------
    def _op_reduce(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        axis, kind = int(op.attrs["axis"]) + self.BATCH, op.attrs["kind"]
        dt = op.operands[0].dtype
        npdt = _np(dt)
        left = op.attrs.get("tie_break_left", True)
        if kind == "sum":
            if dt is T.bfloat16:
                def fn(v):
                    return bf16_round(np.add.reduce(v, axis=axis, dtype=np.float32))
            else:
                def fn(v):
                    return np.add.reduce(v, axis=axis, dtype=npdt)
        elif kind in ("max", "min"):
            if dt.is_floating():
                red = np.fmax if kind == "max" else np.fmin
            else:
                red = np.maximum if kind == "max" else np.minimum

            def fn(v):
                return red.reduce(v, axis=axis)
        elif kind in ("argmax", "argmin"):
            arg = np.argmax if kind == "argmax" else np.argmin

            def fn(v):
                if left:
                    return arg(v, axis=axis).astype(np.int32)
                n = v.shape[axis]
                return (n - 1 - arg(np.flip(v, axis), axis=axis)).astype(np.int32)
        elif kind == "xor_sum":
            def fn(v):
                return np.bitwise_xor.reduce(v, axis=axis)
        else:
            raise InterpreterError(f"{op.loc}: unknown reduction {kind!r}")

        def f(env):
            r = fn(env[x])
            env[s] = r if np.ndim(r) else r[()]
        return f

    def _op_scan(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        axis, kind, reverse = int(op.attrs["axis"]) + self.BATCH, op.attrs["kind"], bool(op.attrs.get("reverse", False))
        dt = op.operands[0].dtype
        npdt = _np(dt)
        if dt.is_floating():
            acc = {"sum": np.add, "prod": np.multiply, "max": np.fmax, "min": np.fmin}[kind]
        else:
            acc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[kind]

        if dt is T.bfloat16:
            def scan(v):  # round after every step
                v = np.moveaxis(np.array(v, dtype=np.float32), axis, 0)
                for i in range(1, v.shape[0]):
                    v[i] = bf16_round(acc(v[i - 1], v[i]))
                return np.moveaxis(v, 0, axis)
        else:
            def scan(v):
                return acc.accumulate(v, axis=axis, dtype=npdt)

        def f(env):
            v = env[x]
            if reverse:
                env[s] = np.flip(scan(np.flip(v, axis)), axis)
            else:
                env[s] = scan(v)
        return f

    def _op_dot(self, op):
        a, b, c = (self._slot(v) for v in op.operands)
        s = self._rs(op)
        adt, rdt = op.operands[0].dtype, op.result.dtype
        prec = op.attrs.get("input_precision", "ieee")
        if adt.is_int():
            def f(env):
                r = np.matmul(env[a].astype(np.int32), env[b].astype(np.int32)) + env[c].astype(np.int32)
                env[s] = r.astype(_np(rdt))
            return f
        wide = np.float64 if adt is T.float64 else np.float32
        tf32 = adt is T.float32 and prec == "tf32"

        def f(env):
            av, bv = env[a].astype(wide), env[b].astype(wide)
            if tf32:
                av, bv = _tf32_round(av), _tf32_round(bv)
            r = np.matmul(av, bv) + env[c].astype(wide)
            env[s] = cast_value(r.astype(np.float64 if wide is np.float64 else np.float32),
                                T.float64 if wide is np.float64 else T.float32, rdt)
        return f

    # -- debugging -----------------------------------------------------------------------------
    def _op_print(self, op):
        slots = [self._slot(v) for v in op.operands]
        types = [v.type for v in op.operands]
        prefix = ir.print_text(op.attrs.get("prefix", ""), len(slots))
        hexa = bool(op.attrs.get("hex", False))
        many = len(slots) > 1

        def fmt(v, dt):
            if hexa:
                bits = _to_mem(np.asarray(v).reshape(1), dt).view(_uint_of_np(_mem_np(dt)))[0]
                return f"0x{int(bits):0{_mem_np(dt).itemsize * 2}x}"
            if dt is T.int1:
                return str(int(bool(v)))
            return str(v.item() if hasattr(v, "item") else v)

        def f(env):
            pid = env[0].pid
            head = f"pid ({int(pid[0])}, {int(pid[1])}, {int(pid[2])})"
            lines = []
            for k, (sl, ty) in enumerate(zip(slots, types)):
                v = np.asarray(env[sl])
                dt = scalar_of(ty)
                tag = f"(operand {k}) " if many else ""
                if v.ndim == 0:
                    lines.append(f"{head} idx (){prefix}{tag}{fmt(v[()], dt)}")
                else:
                    for idx in np.ndindex(v.shape):
                        lines.append(f"{head} idx ({', '.join(str(i) for i in idx)}){prefix}{tag}{fmt(v[idx], dt)}")
            if not slots:
                lines.append(f"{head} idx (){prefix}".rstrip())
            sys.stdout.write("\n".join(lines) + "\n")
        return f

    def _op_assert(self, op):
        c = self._slot(op.operands[0])
        msg = str(op.attrs.get("message", ""))
        loc = op.loc
        fname = loc.fn or self.fn.name

        def f(env):
            v = np.asarray(env[c])
            if v.all():
                return
            pid = env[0].pid
            bad = np.unravel_index(int(np.flatnonzero(~v.astype(bool).ravel())[0]), v.shape) if v.ndim else ()
            raise AssertionError(f"{loc}: {fname}: device assertion failed: {msg} "
                                 f"(pid ({int(pid[0])}, {int(pid[1])}, {int(pid[2])}) idx "
                                 f"({', '.join(str(int(i)) for i in bad)}))")
        return f

    # -- control flow --------------------------------------------------------------------------
    def _op_for(self, op):
        lb, ub, step = (self._slot(v) for v in op.operands[:3])
        init = [self._slot(v) for v in op.operands[3:]]
        body = self._block(op.regions[0])
        iv_slot, iter_slots = body.arg_slots[0], body.arg_slots[1:]
        ivtype = _np(op.regions[0].args[0].type).type
        res = [self._slot(r) for r in op.results]
        fns, yslots = body.fns, body.term_slots
        loc = op.loc
        if len(iter_slots) != len(init) or len(yslots) != len(init) or len(res) != len(init):
            raise InterpreterError(f"{loc}: for: {len(init)} init values, {len(iter_slots)} iter args, "
                                   f"{len(yslots)} yielded, {len(res)} results")

        def f(env):
            i, hi, st = int(env[lb]), int(env[ub]), int(env[step])
            if st == 0:
                raise InterpreterError(f"{loc}: loop step is zero")
            vals = [env[x] for x in init]
            while (i < hi) if st > 0 else (i > hi):
                env[iv_slot] = ivtype(i)
                for sl, v in zip(iter_slots, vals):
                    env[sl] = v
                for g in fns:
                    g(env)
                vals = [env[y] for y in yslots]
                i += st
            for sl, v in zip(res, vals):
                env[sl] = v
        return f

    def _op_if(self, op):
        c = self._slot(op.operands[0])
        then = self._block(op.regions[0])
        other = self._block(op.regions[1]) if len(op.regions) > 1 else _CompiledBlock([], [], None, [])
        res = [self._slot(r) for r in op.results]

        def f(env):
            blk = then if env[c] else other
            for g in blk.fns:
                g(env)
            for sl, y in zip(res, blk.term_slots):
                env[sl] = env[y]
        return f

    def _op_while(self, op):
        init = [self._slot(v) for v in op.operands]
        before = self._block(op.regions[0])
        after = self._block(op.regions[1])
        res = [self._slot(r) for r in op.results]

        def f(env):
            vals = [env[x] for x in init]
            while True:
                for sl, v in zip(before.arg_slots, vals):
                    env[sl] = v
                for g in before.fns:
                    g(env)
                cond, *fwd = [env[y] for y in before.term_slots]
                if not cond:
                    break
                for sl, v in zip(after.arg_slots, fwd):
                    env[sl] = v
                for g in after.fns:
                    g(env)
                vals = [env[y] for y in after.term_slots]
            for sl, v in zip(res, fwd):
                env[sl] = v
        return f

    # -- launching -----------------------------------------------------------------------------
    def launch(self, grid, args):
        grid, values, mem = self._prepare(grid, args)
        state = _State()
        state.mem = mem
        state.grid = tuple(np.int32(g) for g in grid)
        env = [None] * self.nslots
        env[0] = state
        for sl, v in zip(self.arg_slots, values):
            env[sl] = v
        fns = self.body.fns
        with np.errstate(all="ignore"):
            for z in range(grid[2]):
                for y in range(grid[1]):
                    for x in range(grid[0]):
                        state.pid = (np.int32(x), np.int32(y), np.int32(z))
                        try:
                            for g in fns:
                                g(env)
                        except _Return:
                            pass

    def _prepare(self, grid, args):
        """(grid as 3 ints, per-argument numpy values, the memory table of the buffer arguments)."""
        fn = self.fn
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(tuple(grid)))
        if len(grid) != 3 or any(g < 0 for g in grid):
            raise ValueError(f"grid must have 1 to 3 non-negative sizes, got {grid}")
        args = list(args)
        types = [a.type for a in fn.args]
        attrs = list(fn.arg_attrs or [{}] * len(types))
        if len(args) != len(types):
            # arguments specialized to 1 may be left out by the caller
            skipped = [i for i, a in enumerate(attrs) if a.get("equal_to_1")]
            if len(args) + len(skipped) == len(types):
                it = iter(args)
                args = [1 if i in skipped else next(it) for i in range(len(types))]
            else:
                raise TypeError(f"{fn.name} takes {len(types)} arguments ({', '.join(fn.arg_names)}), "
                                f"got {len(args)}")
        mem = _Memory()
        values = []
        for name, ty, a in zip(fn.arg_names, types, args):
            values.append(self._arg_value(name, ty, a, mem))
        # the buffers stay alive: the caller holds `args` until launch returns
        return grid, values, mem

    @staticmethod
    def _arg_value(name, ty, a, mem):
        if isinstance(ty, block_type):
            raise InterpreterError(f"argument {name!r} has a block type {ty}")
        if isinstance(ty, pointer_type):
            if a is None:
                raise TypeError(f"argument {name!r} is a pointer; got None")
            if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
                return np.int64(_wrap_int(int(a), 64, True))
            found = _buffer_of(a, name)
            if found is None:
                raise TypeError(f"argument {name!r} is a pointer; expected a numpy array or a CPU tensor, "
                                f"got {type(a).__name__}")
            buf, ptr = found
            if buf is not None:
                mem.add(*buf, name)
            return np.int64(ptr)
        if hasattr(a, "item") and not isinstance(a, np.ndarray):
            a = a.item()
        elif isinstance(a, np.ndarray) and a.ndim == 0:
            a = a.item()
        if not isinstance(a, (bool, int, float)):
            raise TypeError(f"argument {name!r} has type {ty}; got {type(a).__name__}")
        return _scalar_from_py(a, ty)


class _VecProgram(Program):
    """All programs of a chunk of the grid at once: every value carries a leading program axis.

    Used for straight-line kernels (no control flow regions, atomics, print or assert). Programs
    of a grid run concurrently on the GPU with no ordering between them, so running each op for
    all programs before the next op is one legal schedule; every program still sees its own
    ops in order. Chunks keep each value at about `CHUNK_ELEMENTS` elements.
    """

    BATCH = 1
    CHUNK_ELEMENTS = 1 << 18

    @staticmethod
    def eligible(fn: ir.Function) -> bool:
        for op in fn.walk():
            if op.regions or op.name in ("atomic_rmw", "atomic_cas", "print", "assert", "for", "if", "while"):
                return False
        return True

    def __init__(self, fn):
        super().__init__(fn)
        sizes = [1]
        for op in fn.walk():
            for v in list(op.results) + [o for o in op.operands if o is not None]:
                if isinstance(v.type, block_type):
                    sizes.append(v.type.numel)
        self.max_numel = max(sizes)

    def _checked(self, op, f):
        if len(op.results) != 1:
            return f
        r = op.results[0]
        s, shape, npdt, ty = self._slot(r), shape_of(r.type), _np(scalar_of(r.type)), r.type

        def g(env):
            f(env)
            v = env[s]
            if v.shape[1:] != shape or v.shape[0] != env[0].P or v.dtype != npdt:
                if v.shape[1:] != shape or v.shape[0] != env[0].P:
                    raise InterpreterError(f"{op.loc}: {op.name} produced shape {v.shape[1:]} for "
                                           f"{v.shape[0]} programs, its IR type says {ty}")
                env[s] = v.astype(npdt)
        return g

    def _op_const(self, op):
        ty = op.result.type
        v = _scalar_from_py(op.attrs["value"], scalar_of(ty))
        shape = shape_of(ty)
        base = np.full(shape, v, dtype=v.dtype)
        s = self._rs(op)

        def f(env):
            env[s] = np.broadcast_to(base, (env[0].P,) + shape)
        return f

    def _op_arange(self, op):
        v = np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)
        s = self._rs(op)

        def f(env):
            env[s] = np.broadcast_to(v, (env[0].P,) + v.shape)
        return f

    def _op_num_programs(self, op):
        axis, s = int(op.attrs["axis"]), self._rs(op)

        def f(env):
            env[s] = env[0].nprog[axis]
        return f

    def _op_splat(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        shape = op.result.type.shape
        ones = (1,) * len(shape)

        def f(env):
            v = env[x]
            env[s] = np.broadcast_to(v.reshape(v.shape + ones), v.shape + shape)
        return f

    def _op_broadcast(self, op):
        x, s = self._slot(op.operands[0]), self._rs(op)
        shape = op.result.type.shape

        def f(env):
            env[s] = np.broadcast_to(env[x], (env[0].P,) + shape)
        return f

    def _op_reshape(self, op):
        x, s, shape = self._slot(op.operands[0]), self._rs(op), shape_of(op.result.type)

        def f(env):
            env[s] = np.reshape(env[x], (env[0].P,) + shape)
        return f

    def _op_load(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, m, o = (self._slot(v) for v in ops[:3])
        s = self._rs(op)
        dt = op.result.dtype
        npdt = _np(dt)
        loc = op.loc
        sshape = shape_of(op.result.type)

        def f(env):
            st = env[0]
            shape = (st.P,) + sshape
            flat = np.ravel(env[p])
            mask = None if m is None else np.ravel(env[m])
            if mask is None or mask.all():
                env[s] = st.mem.gather(flat, dt, "load", loc, None, shape).reshape(shape)
                return
            if o is None:
                out = np.zeros(flat.size, dtype=npdt)
            else:
                out = np.array(np.broadcast_to(env[o], shape), dtype=npdt).reshape(-1)
            lanes = np.flatnonzero(mask)
            if lanes.size:
                out[lanes] = st.mem.gather(flat[lanes], dt, "load", loc, lanes, shape)
            env[s] = out.reshape(shape)
        return f

    def _op_store(self, op):
        ops = list(op.operands) + [None] * (3 - len(op.operands))
        p, v, m = (self._slot(x) for x in ops[:3])
        dt = op.operands[0].dtype.element_ty
        loc = op.loc
        sshape = shape_of(op.operands[0].type)

        def f(env):
            st = env[0]
            shape = (st.P,) + sshape
            flat = np.ravel(env[p])
            vals = np.ravel(np.broadcast_to(env[v], shape))
            mask = None if m is None else np.ravel(env[m])
            if mask is None or mask.all():
                st.mem.scatter(flat, vals, dt, "store", loc, None, shape)
                return
            lanes = np.flatnonzero(mask)
            if lanes.size:
                st.mem.scatter(flat[lanes], vals[lanes], dt, "store", loc, lanes, shape)
        return f

    def launch(self, grid, args):
        grid, values, mem = self._prepare(grid, args)
        total = grid[0] * grid[1] * grid[2]
        if total == 0:
            return
        chunk = max(1, min(total, self.CHUNK_ELEMENTS // self.max_numel))
        state = _State()
        state.mem = mem
        state.grid = tuple(np.int32(g) for g in grid)
        env = [None] * self.nslots
        env[0] = state
        fns = self.body.fns
        with np.errstate(all="ignore"):
            for start in range(0, total, chunk):
                q = np.arange(start, min(total, start + chunk), dtype=np.int64)
                P = q.size
                state.P = P
                state.pid = ((q % grid[0]).astype(np.int32), ((q // grid[0]) % grid[1]).astype(np.int32),
                             (q // (grid[0] * grid[1])).astype(np.int32))
                state.nprog = tuple(np.full(P, g, dtype=np.int32) for g in grid)
                mem.vec_pids = state.pid
                for sl, v in zip(self.arg_slots, values):
                    env[sl] = np.full(P, v, dtype=v.dtype)
                try:
                    for g in fns:
                        g(env)
                except _Return:
                    pass


def _uint_of(dt):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[_mem_np(dt).itemsize]


def _uint_of_np(npdt):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(npdt).itemsize]


def _raise_return(env):
    raise _Return()


_cache: dict[int, tuple] = {}
_cache_lock = threading.Lock()


def _vectorize_enabled() -> bool:
    return knobs.runtime.interpret_vectorize


def compile_function(fn: ir.Function, vectorize: bool | None = None) -> Program:
    """The compiled form of `fn` (cached while `fn` is alive). With `vectorize` (default: on unless
    BLOCKTUNE_INTERPRET_VECTORIZE=0), straight-line kernels run all programs of a chunk at once."""
    if vectorize is None:
        vectorize = _vectorize_enabled()
    key = (id(fn), bool(vectorize))
    hit = _cache.get(key)
    if hit is not None and hit[0]() is fn:
        return hit[1]
    prog = _VecProgram(fn) if vectorize and _VecProgram.eligible(fn) else Program(fn)
    with _cache_lock:
        try:
            ref = weakref.ref(fn, lambda _r, k=key, c=_cache: c.pop(k, None))
        except TypeError:
            return prog
        _cache[key] = (ref, prog)
    return prog


def run(fn: ir.Function, grid, args: list) -> None:
    """Execute `fn` once per program id of `grid` (1 to 3 sizes) with `args` (see module doc)."""
    compile_function(fn).launch(grid, args)
