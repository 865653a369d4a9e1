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
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, Val):
        return x.v
    if isinstance(x, ll.Constant):
        return np.full(n, int(x.constant), dtype=np.int64)
    raise TypeError(f"the model has no value for {x!r}")


@dataclass
class Vec:
    """A vector register (`<N x T>`) of every thread: one per-thread array per element; `es` is the
    element's size in bytes (shared-memory stores and loads put element j at byte address + j·es)."""
    elems: list
    es: int


def _elem_bytes(t) -> int:
    if isinstance(t, ll.IntType):
        return max(1, t.width // 8)
    return {"half": 2, "bfloat": 2, "float": 4, "double": 8}[str(t)]


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

    trunc = zext

    def bitcast(self, x, t):
        return x if isinstance(x, Vec) else Val(self._a(x), t)   # a packed vector stays its elements

    def store(self, v, ptr, align=None):
        if isinstance(v, Vec):
            self.cta.record("st", self._a(ptr), v.es * len(v.elems))
            for j, x in enumerate(v.elems):
                self.cta.smem_store(self._a(ptr) + j * v.es, self._a(x))
            return
        self.cta.smem_store(self._a(ptr), self._a(v))

    def load(self, ptr, typ=I32, align=None):
        if isinstance(typ, ll.VectorType):
            es = _elem_bytes(typ.element)
            self.cta.record("ld", self._a(ptr), es * typ.count)
            return Vec([self.cta.smem_load(self._a(ptr) + j * es) for j in range(typ.count)], es)
        return Val(self.cta.smem_load(self._a(ptr)), typ)

    # ---- vectors: `<N x T>` values built element by element, bitcast to words and back ---------
    def insert_element(self, vec, x, idx):
        if isinstance(vec, ll.Constant):   # undef <N x T>: the start of a vector
            vec = Vec([None] * vec.type.count, _elem_bytes(vec.type.element))
        elems = list(vec.elems)
        elems[int(idx.constant)] = self._a(x)
        return Vec(elems, vec.es)

    def extract_element(self, vec, idx):
        return Val(vec.elems[int(idx.constant)])

    def ptrtoint(self, x, t):
        return Val(self._a(x), t)

    def call(self, fn, args):
        """Inline PTX the model knows: stmatrix.sync.aligned.m8n8.x{1,2,4}.shared.b16."""
        text = getattr(fn, "asm", "")
        m = re.match(r"stmatrix\.sync\.aligned\.m8n8\.x(\d)\.shared\.b16", text)
        if m is None:
            raise NotImplementedError(f"the model has no {text or fn!r}")
        self.cta.stmatrix(self._a(args[0]), args[1:1 + int(m[1])])


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
        self.accesses = []   # (kind, per-thread byte addresses, bytes per thread) of vector/matrix accesses

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

    def record(self, kind, addr, nbytes):
        self.accesses.append((kind, np.asarray(addr).copy(), nbytes))

    def stmatrix(self, addr, words):
        """PTX stmatrix.m8n8.b16: matrix j's row r goes to the address lane 8j + r gives; each
        thread's word j holds that matrix's row lane / 4, element pair lane % 4."""
        lane, base = self.lane.v, self.warp.v * 32
        for j, w in enumerate(words):
            row_addr = addr[base + 8 * j + lane // 4]
            lo, hi = w.elems
            self.smem_store(row_addr + (lane % 4) * 4, lo)
            self.smem_store(row_addr + (lane % 4) * 4 + 2, hi)
        # the rows each lane addresses, as 16-byte accesses (for the bank-conflict count)
        for j in range(len(words)):
            self.record("stmatrix", addr[base + 8 * j + lane % 8], 16)

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
