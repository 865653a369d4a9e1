"""The interpreter's memory: the allocations a launch's arguments live in, and checked gathers,
scatters and element references at byte addresses.

Every array/tensor argument registers the whole allocation it lives in (the root numpy array, or
the torch storage), so views, strides and offsets work as on the GPU. A load/store/atomic lane that
is active (mask true, or no mask) must fall inside one of those allocations, naturally aligned;
otherwise an `IndexError` names the kernel source location. Masked-off lanes never touch memory.
An address outside every argument may still lie in a live CPU torch tensor the kernel reached
through memory (tutorial 08 reads its matrices' addresses from a device array, as Triton's
interpreter allows): that tensor's allocation is then registered too (`_adopt`).
"""
from __future__ import annotations

import bisect
import ctypes
import gc
import sys

import numpy as np

from ..language import dtypes as T
from .values import InterpreterError, _mem_np, bf16_to_bits, bits_to_bf16


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

    def _adopt(self, addr, size) -> _Buffer | None:
        """Register the live CPU torch tensor whose allocation holds [addr, addr + size), if any."""
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        for obj in gc.get_objects():
            if type(obj) is not torch.Tensor and not isinstance(obj, torch.Tensor):
                continue
            try:
                if obj.device.type != "cpu":
                    continue
                st = obj.untyped_storage()
                lo, hi = st.data_ptr(), st.data_ptr() + st.nbytes()
            except (RuntimeError, NotImplementedError):  # meta, sparse or nested tensors hold no plain storage
                continue
            if lo <= addr and addr + size <= hi:
                raw = np.ctypeslib.as_array((ctypes.c_uint8 * (hi - lo)).from_address(lo))
                self.add(lo, hi, raw, obj, "a tensor reached by address")
                return self._find(addr)
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
            if b is None:
                b = self._adopt(first, size)
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
