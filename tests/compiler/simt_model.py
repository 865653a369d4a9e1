"""Runs a backend lowering rule on a model of one CTA instead of emitting LLVM IR.

The rule's own code runs unchanged: every builder call it makes (`b.add`, `b.select`, shuffles
through `lw.call`, shared-memory stores and loads, the thread-index arithmetic of
`Lowering.linear`) is evaluated at once for all threads of the CTA, each value being a numpy array
with one entry per thread. A rule's data movement (which lane, warp and register meets which, and in
which order the combine function sees them) can so be checked on the CPU for any layout.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir as ll

from compiler.backend.layouts import Layout
from compiler.backend.llvm_types import I32
from compiler.backend.lowering import Lowering


@dataclass
class Val:
    """One register of every thread (entry t: thread t = warp * 32 + lane)."""
    v: np.ndarray
    type: object = I32


def _arr(x, n):
    if isinstance(x, Val):
        return x.v
    if isinstance(x, ll.Constant):
        return np.full(n, int(x.constant), dtype=np.int64)
    raise TypeError(f"the model has no value for {x!r}")


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}


class Builder:
    """The subset of llvmlite's IRBuilder that the reduction/scan rules use, on per-thread arrays."""

    def __init__(self, cta: "CTA"):
        self.cta = cta

    def _a(self, x):
        return _arr(x, self.cta.n_threads)

    def _binary(f):
        def op(self, x, y):
            return Val(f(self._a(x), self._a(y)), getattr(x, "type", I32))
        return op

    add, mul, and_, or_, xor, shl, lshr = map(_binary, (np.add, np.multiply, np.bitwise_and, np.bitwise_or,
                                                        np.bitwise_xor, np.left_shift, np.right_shift))

    def icmp_unsigned(self, op, x, y):
        return Val(_CMP[op](self._a(x), self._a(y)))

    icmp_signed = icmp_unsigned

    def select(self, c, p, q):
        return Val(np.where(self._a(c), self._a(p), self._a(q)), p.type)

    def zext(self, x, t):
        return Val(self._a(x), t)

    trunc = bitcast = zext

    def store(self, v, ptr, align=None):
        self.cta.smem_store(self._a(ptr), self._a(v))

    def load(self, ptr, typ=I32, align=None):
        return Val(self.cta.smem_load(self._a(ptr)), typ)


class CTA:
    """The threads of one CTA and its shared memory, standing in for the `Lowering` a rule gets."""

    linear = Lowering.linear
    thread_flat = Lowering.thread_flat
    thread_coord = Lowering.thread_coord
    combine_const = Lowering.combine_const
    index = Lowering.index

    def __init__(self, num_warps: int):
        self.num_warps = num_warps
        self.n_threads = 32 * num_warps
        tid = np.arange(self.n_threads, dtype=np.int64)
        self.lane, self.warp = Val(tid % 32), Val(tid // 32)
        self.b = self.pb = Builder(self)
        self._tl_cache = {}
        self.smem_bytes = 0
        self.smem = {}
        self.vals = {}

    # ---- what rules call on the lowering ---------------------------------------------------
    def call(self, name, ret, args, pb=False):
        m = re.fullmatch(r"llvm\.nvvm\.shfl\.sync\.(up|down|bfly|idx)\.i32", name)
        if not m:
            raise NotImplementedError(f"the model has no {name}")
        x, arg = _arr(args[1], self.n_threads), _arr(args[2], self.n_threads)
        lane, base = self.lane.v, self.warp.v * 32
        src = {"up": lane - arg, "down": lane + arg, "bfly": lane ^ arg, "idx": arg & 31}[m[1]]
        src = np.where((src < 0) | (src > 31), lane, src)  # out of range: the lane keeps its own value
        return Val(x[base + src], ret)

    def barrier(self):
        pass

    def smem_ptr(self, off):
        return off

    def smem_store(self, addr, v):
        written = {}
        for a, x in zip(addr.tolist(), v.tolist()):
            if written.setdefault(a, x) != x:
                raise AssertionError(f"threads race on shared byte {a} with different values")
        self.smem.update(written)

    def smem_load(self, addr):
        missing = set(addr.tolist()) - self.smem.keys()
        if missing:
            raise AssertionError(f"load of never-written shared bytes {sorted(missing)[:4]}")
        return np.array([self.smem[a] for a in addr.tolist()], dtype=np.int64)

    def layout_of(self, v):
        return self.vals[v.id][0]

    def block(self, v, lay: Layout):
        """v's registers in `lay`, read from its element array (a layout conversion is free here)."""
        elems = self.vals[v.id][1]
        lanes, warps = self.lane.v.tolist(), self.warp.v.tolist()
        return [Val(np.array([elems[lay.coord(r, ln, w)] for ln, w in zip(lanes, warps)], dtype=np.int64))
                for r in range(lay.n_regs)]

    def set_block(self, v, lay: Layout, regs):
        assert len(regs) == lay.n_regs
        self.vals[v.id] = (lay, regs)

    # ---- set-up and read-back for tests -------------------------------------------------------
    def put(self, v, lay: Layout, elems: np.ndarray):
        """Give value `v` the elements `elems` (an array of the block's shape) held in layout `lay`."""
        self.vals[v.id] = (lay, elems)

    def elements(self, v) -> np.ndarray:
        """The block `v` as every thread holds it; a replicated element must agree in all its holders."""
        lay, regs = self.vals[v.id]
        out = np.full(lay.shape, -1, dtype=np.int64)
        seen = np.zeros(lay.shape, dtype=bool)
        for r, reg in enumerate(regs):
            for t, x in enumerate(_arr(reg, self.n_threads).tolist()):
                c = lay.coord(r, t % 32, t // 32)
                if seen[c] and out[c] != x:
                    raise AssertionError(f"element {c} differs between the threads that hold it")
                out[c], seen[c] = x, True
        assert seen.all(), "some elements are held by no thread"
        return out


@dataclass
class Value:
    """An IR value as far as a rule looks at it."""
    id: int
    shape: tuple
    dtype: object

    @property
    def type(self):
        return self

    @property
    def numel(self):
        return int(np.prod(self.shape))

    is_block = True


@dataclass
class Op:
    operands: list
    results: list
    attrs: dict = field(default_factory=dict)
