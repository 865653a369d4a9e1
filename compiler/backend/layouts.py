"""Linear layouts: which thread owns which elements of a block.

A layout of a block of shape S (every dim a power of two) maps three groups of input bits —
register bits (the index into the thread's list of values), lane bits (5) and warp bits
(log2 num_warps) — to a coordinate in S. Each input bit has a basis vector (one coordinate tuple);
the coordinate of (reg, lane, warp) is the XOR of the bases of the bits that are set. A zero basis
means replication (the value is held by several lanes/warps). Register bases are never zero:
replicated registers would only cost instructions, so the canonical form drops them.

This is Triton's LinearLayout restricted to what the backend needs. Because dims are powers of
two, a coordinate's row-major flat offset is also linear, so `flat` bases give shared-memory
offsets directly (`offset(reg, lane, warp) = XOR of flat bases`).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod


def log2(n: int) -> int:
    assert n > 0 and n & (n - 1) == 0, f"{n} is not a power of two"
    return n.bit_length() - 1


def _unit(rank: int, d: int, v: int) -> tuple:
    c = [0] * rank
    c[d] = v
    return tuple(c)


def _xor(a: tuple, b: tuple) -> tuple:
    return tuple(x ^ y for x, y in zip(a, b))


def _is_zero(c: tuple) -> bool:
    return not any(c)


@dataclass(frozen=True)
class Layout:
    shape: tuple
    reg: tuple    # tuple of coordinate tuples, one per register bit (never zero)
    lane: tuple   # 5 coordinate tuples (zero = replicated across that lane bit)
    warp: tuple   # log2(num_warps) coordinate tuples

    # ---- basic facts ------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def n_regs(self) -> int:
        return 1 << len(self.reg)

    @property
    def num_warps(self) -> int:
        return 1 << len(self.warp)

    def reg_coord(self, r: int) -> tuple:
        c = (0,) * self.rank
        for i, b in enumerate(self.reg):
            if r >> i & 1:
                c = _xor(c, b)
        return c

    def coord(self, r: int, lane: int, warp: int) -> tuple:
        c = self.reg_coord(r)
        for i, b in enumerate(self.lane):
            if lane >> i & 1:
                c = _xor(c, b)
        for i, b in enumerate(self.warp):
            if warp >> i & 1:
                c = _xor(c, b)
        return c

    def strides(self) -> tuple:
        s, acc = [], 1
        for n in reversed(self.shape):
            s.append(acc)
            acc *= n
        return tuple(reversed(s))

    def flat(self, c: tuple) -> int:
        return sum(x * s for x, s in zip(c, self.strides()))

    def reg_index_map(self) -> dict:
        """register coordinate → register index."""
        return {self.reg_coord(r): r for r in range(self.n_regs)}

    def thread_replicated(self) -> bool:
        return any(_is_zero(b) for b in self.lane + self.warp)

    def numel(self) -> int:
        return prod(self.shape)

    def __str__(self) -> str:
        return f"Layout({list(self.shape)}, reg={list(self.reg)}, lane={list(self.lane)}, warp={list(self.warp)})"

    # ---- transformations --------------------------------------------------------------------
    def _map(self, f, shape) -> "Layout":
        reg = tuple(c for c in (f(b) for b in self.reg) if not _is_zero(c))
        return Layout(tuple(shape), reg, tuple(f(b) for b in self.lane), tuple(f(b) for b in self.warp))

    def slice(self, axis: int) -> "Layout":
        """The layout of the result of reducing `axis` (that coordinate dropped)."""
        shape = self.shape[:axis] + self.shape[axis + 1:]
        return self._map(lambda c: c[:axis] + c[axis + 1:], shape)

    def expand(self, axis: int) -> "Layout":
        shape = self.shape[:axis] + (1,) + self.shape[axis:]
        return self._map(lambda c: c[:axis] + (0,) + c[axis:], shape)

    def squeeze(self, axis: int) -> "Layout":
        """Inverse of expand: drop a size-1 dim."""
        assert self.shape[axis] == 1
        return self.slice(axis)

    def trans(self, perm: tuple) -> "Layout":
        shape = tuple(self.shape[p] for p in perm)
        return self._map(lambda c: tuple(c[p] for p in perm), shape)

    def project(self, src_shape: tuple) -> "Layout":
        """The layout for a broadcast operand of shape `src_shape` (size-1 dims zeroed)."""
        keep = [s != 1 or t == 1 for s, t in zip(src_shape, self.shape)]
        return self._map(lambda c: tuple(x if k else 0 for x, k in zip(c, keep)), src_shape)

    def with_minor_pair(self) -> "Layout":
        """The layout of shape + (2,) whose new minor dim is the thread's first register bit, the
        rest as here: `tl.join` of two values in this layout needs no data movement."""
        ext = lambda c: c + (0,)  # noqa: E731
        return Layout(self.shape + (2,), ((0,) * self.rank + (1,),) + tuple(ext(b) for b in self.reg),
                      tuple(ext(b) for b in self.lane), tuple(ext(b) for b in self.warp))

    def reshape(self, shape: tuple) -> "Layout":
        """Row-major order kept: relabel each basis through the flat offset."""
        shape = tuple(shape)
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        strides = tuple(reversed(strides))

        def f(c):
            off = self.flat(c)
            return tuple((off // s) % n for s, n in zip(strides, shape))
        return self._map(f, shape)


def blocked(shape: tuple, order: tuple, vec: int, num_warps: int, threads_per_warp: int = 32,
            size_per_thread: tuple | None = None) -> Layout:
    """Triton's blocked layout: `vec` (or size_per_thread) elements per thread along the fastest
    dim `order[0]`, then lanes, then warps (each filling dims in `order`), then wrap-around into
    more registers. Dims smaller than the tile leave zero bases (replication)."""
    rank = len(shape)
    if rank == 0:
        return Layout((), (), ((),) * log2(threads_per_warp), ((),) * log2(num_warps))
    logs = [log2(s) for s in shape]
    used = [0] * rank
    reg, lane, warp = [], [], []
    spt = list(size_per_thread) if size_per_thread else [1] * rank
    if not size_per_thread:
        spt[order[0]] = vec
    for d in order:
        for _ in range(min(log2(spt[d]), logs[d] - used[d])):
            reg.append(_unit(rank, d, 1 << used[d]))
            used[d] += 1
    for group, n in ((lane, log2(threads_per_warp)), (warp, log2(num_warps))):
        for d in order:
            while n and used[d] < logs[d]:
                group.append(_unit(rank, d, 1 << used[d]))
                used[d] += 1
                n -= 1
        group.extend([(0,) * rank] * n)
    for d in order:
        while used[d] < logs[d]:
            reg.append(_unit(rank, d, 1 << used[d]))
            used[d] += 1
    return Layout(tuple(shape), tuple(reg), tuple(lane), tuple(warp))


def default_layout(shape: tuple, num_warps: int) -> Layout:
    """Triton's default for values no memory op anchors: one element per thread, last dim fastest."""
    order = tuple(reversed(range(len(shape))))
    return blocked(shape, order, 1, num_warps)


def scalar_layout(num_warps: int) -> Layout:
    return blocked((), (), 1, num_warps)


def dot_operand(c: Layout, op_idx: int, k: int) -> Layout:
    """FMA dot operand layout: each thread holds, for every C element it owns, the whole K row of A
    (op_idx 0, shape [M, K]) or K column of B (op_idx 1, shape [K, N])."""
    m, n = c.shape
    kb = [(0, 1 << i) if op_idx == 0 else (1 << i, 0) for i in range(log2(k))]

    def f(cc):
        return (cc[0], 0) if op_idx == 0 else (0, cc[1])
    shape = (m, k) if op_idx == 0 else (k, n)
    reg = tuple(kb) + tuple(x for x in (f(b) for b in c.reg) if any(x))
    return Layout(shape, reg, tuple(f(b) for b in c.lane), tuple(f(b) for b in c.warp))


def dot_acc_layout(m: int, n: int, num_warps: int) -> Layout:
    """Accumulator layout for the FMA dot: a near-square tile per thread (up to 8×8)."""
    threads = 32 * num_warps
    per = max(1, m * n // threads)
    # split per-thread elements: columns first (contiguous), then rows
    sn = min(n, 1 << ((log2(per) + 1) // 2), 8)
    sm = min(m, max(1, per // sn), 8)
    return blocked((m, n), (1, 0), 1, num_warps, size_per_thread=(sm, sn))
