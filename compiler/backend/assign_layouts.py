"""Layout assignment: choose a linear layout for every block value.

1. Anchors (in priority order): dot accumulators (the FMA tile layout), then loads, stores and
   atomics (a blocked layout coalesced along the pointer's most contiguous dim, `vec` elements per
   thread from the axis info), like Triton's Coalesce pass.
2. Backward propagation from each anchor through layout-transparent ops (elementwise, casts,
   broadcast, expand_dims, trans, reshape, addptr …): index arithmetic gets computed directly in
   the layout its load wants.
3. Forward propagation in program order for what is left (reductions give slice layouts); values
   with no constraint at all get the default blocked layout.
Loop-carried values (for/while/if) share one layout per slot (iter arg = init = yield = result).

Where two layouts still meet, the lowering converts (through shared memory) or rematerializes
cheap values (arange/splat/const chains) in the wanted layout.
"""
from __future__ import annotations

from .. import ir
from .axis_info import AxisAnalysis
from .dot_layouts import acc_layout_for, mma_kind
from .layouts import Layout, blocked, default_layout, dot_acc_layout, log2

ELEMENTWISE = set(ir.BINARY_OPS) | set(ir.UNARY_OPS) | {"cmp", "fma", "umulhi", "select", "cast", "bitcast",
                                                       "addptr", "assume", "load", "atomic_rmw", "atomic_cas",
                                                       "extern_elementwise"}


def memory_layout(ptr: ir.Value, axis: AxisAnalysis, num_warps: int) -> Layout:
    """Triton's coalescing choice for a memory op on block pointer `ptr`."""
    shape = ptr.shape
    info = axis.get(ptr)
    elt = ptr.dtype.element_ty
    size = max(1, elt.itemsize)
    # order: most contiguous dim first (ties: the later dim, i.e. row-major)
    order = tuple(sorted(range(len(shape)), key=lambda d: (-info.contiguity[d], -d)))
    d0 = order[0]
    contig = info.contiguity[d0]
    align_elems = max(1, info.divisibility[d0] // size)
    vec = max(1, min(contig, align_elems, max(1, 16 // size)))
    vec = 1 << (vec.bit_length() - 1)
    numel = 1
    for s in shape:
        numel *= s
    per_thread = max(1, numel // (32 * num_warps))
    vec = max(1, min(vec, per_thread, shape[d0]))
    return blocked(shape, order, vec, num_warps)


class _Links:
    """Union-find over value ids that must share a layout (loop-carried / if-merged slots)."""

    def __init__(self):
        self.parent: dict[int, int] = {}
        self.members: dict[int, list] = {}

    def find(self, x: int) -> int:
        while self.parent.get(x, x) != x:
            x = self.parent[x]
        return x

    def union(self, a: ir.Value, b: ir.Value):
        if not (a.is_block and b.is_block):
            return
        for v in (a, b):
            if v.id not in self.parent:
                self.parent[v.id] = v.id
                self.members[v.id] = [v]
        ra, rb = self.find(a.id), self.find(b.id)
        if ra != rb:
            self.parent[rb] = ra
            self.members[ra].extend(self.members.pop(rb))

    def group(self, v: ir.Value) -> list:
        if v.id not in self.parent:
            return [v]
        return self.members[self.find(v.id)]


class LayoutAssignment:
    def __init__(self, fn: ir.Function, options, axis: AxisAnalysis | None = None):
        self.fn, self.options, self.num_warps = fn, options, options.num_warps
        self.axis = axis or AxisAnalysis(fn)
        self.layout: dict[int, Layout] = {}
        self.links = _Links()
        self._work: list[ir.Value] = []
        self._link(fn.body)
        self._anchors()
        self._forward_from_anchors()
        self._forward(fn.body)

    def get(self, v: ir.Value) -> Layout | None:
        return self.layout.get(v.id)

    # ---------------------------------------------------------------------------------------
    def _link(self, block: ir.Block):
        for op in block.ops:
            if op.name == "for":
                body = op.regions[0]
                y = body.terminator
                for i, init in enumerate(op.operands[3:]):
                    self.links.union(init, body.args[i + 1])
                    self.links.union(init, op.results[i])
                    if y is not None and i < len(y.operands):
                        self.links.union(init, y.operands[i])
            elif op.name == "if":
                for r in op.regions:
                    y = r.terminator
                    if y is not None:
                        for i, res in enumerate(op.results):
                            if i < len(y.operands):
                                self.links.union(res, y.operands[i])
            elif op.name == "while":
                before, after = op.regions
                cond, y = before.terminator, after.terminator
                for i, init in enumerate(op.operands):
                    self.links.union(init, before.args[i])
                    if y is not None and i < len(y.operands):
                        self.links.union(init, y.operands[i])
                if cond is not None:
                    for j, fwd in enumerate(cond.operands[1:]):
                        self.links.union(fwd, after.args[j])
                        if j < len(op.results):
                            self.links.union(fwd, op.results[j])
            for r in op.regions:
                self._link(r)

    def _set(self, v: ir.Value | None, lay: Layout):
        if v is None or not v.is_block or v.id in self.layout:
            return
        assert lay.shape == v.shape, (lay.shape, v.shape)
        for m in self.links.group(v):
            if m.id not in self.layout:
                self.layout[m.id] = lay
                self._work.append(m)

    def _drain(self):
        while self._work:
            v = self._work.pop()
            op = v.owner
            if op is None:
                continue
            lay = self.layout[v.id]
            self._backward(op, lay)

    def _backward(self, op: ir.Op, lay: Layout):
        n = op.name
        if n in ELEMENTWISE or n == "select":
            for o in op.operands:
                if o is not None and o.is_block and o.shape == lay.shape:
                    self._set(o, lay)
        elif n == "broadcast":
            o = op.operands[0]
            if o.is_block:
                self._set(o, lay.project(o.shape))
        elif n == "expand_dims":
            o = op.operands[0]
            if o.is_block:
                self._set(o, lay.squeeze(op.attrs["axis"]))
        elif n == "trans":
            perm = tuple(op.attrs["perm"])
            inv = tuple(perm.index(i) for i in range(len(perm)))
            self._set(op.operands[0], lay.trans(inv))
        elif n == "reshape":
            o = op.operands[0]
            if o.is_block:
                self._set(o, lay.reshape(o.shape))
        elif n == "dot":
            self._set(op.operands[2], lay)
        elif n == "join":
            for o in op.operands:
                if o.is_block:
                    self._set(o, lay.slice(lay.rank - 1))
        elif n == "split":
            self._set(op.operands[0], lay.with_minor_pair())

    def _anchors(self):
        ops = list(self.fn.walk())
        for op in ops:
            if op.name == "dot":
                m, n = op.result.shape
                self._set(op.result, acc_layout_for(op, self.options) or dot_acc_layout(m, n, self.num_warps))
                self._drain()
                forward_epilogue(self, op)
        for kind in (("load",), ("store",), ("atomic_rmw", "atomic_cas")):
            if kind == ("load",):
                self._anchor_tma(ops, "load")
            if kind != ("load",):
                # values stored are usually computed from loads: let them keep that layout when
                # it is coalesced along the same dim as the store wants (no shared-memory
                # round trip; at worst narrower vectors), as Triton's layout propagation does
                self._forward_from_anchors(pointers=False)
                # a TMA store's value keeps the layout it is computed in (any layout writes the
                # tile); only one with none gets the row-major one
                self._anchor_tma(ops, kind[0])
            for op in ops:
                if op.name in kind and op.operands[0].is_block:
                    ptr = op.operands[0]
                    lay = self.layout.get(ptr.id)
                    if lay is None:
                        lay = memory_layout(ptr, self.axis, self.num_warps)
                        val = op.operands[1] if kind != ("load",) and len(op.operands) > 1 else None
                        have = self.layout.get(val.id) if val is not None and val.is_block else None
                        if all(c == 1 for c in self.axis.get(ptr).contiguity):
                            # a gather/scatter: nothing to coalesce, so take the layout its
                            # indices (or the stored values) already have: no conversion
                            src = have or self._operand_layout(ptr)
                            if src is not None and src.shape == lay.shape:
                                have = lay = src
                        if have is not None and have.shape == lay.shape and _fastest(have) == _fastest(lay):
                            d, es = _fastest(lay), max(1, ptr.dtype.element_ty.itemsize)
                            tiny = have.numel() * es <= 512
                            if tiny or _run_bytes(have, d, es) >= min(_run_bytes(lay, d, es), 128):
                                lay = have
                    for o in op.operands:
                        self._set(o, lay)
                    for r in op.results:
                        self._set(r, lay)
                    self._drain()

    def _anchor_tma(self, ops, kind: str):
        """TMA loads' results (with the loads) and the values of TMA stores (with the stores, after
        the forward push) go through a swizzled shared-memory tile, row-major: 16-byte vectors
        along the last dim read and write it without bank conflicts."""
        name = {"load": "tma_load", "store": "tma_store"}.get(kind)
        for op in ops:
            if op.name != name:
                continue
            v = op.result if name == "tma_load" else op.operands[-1]
            if v.id in self.layout:
                continue
            rank = len(v.shape)
            vec = max(1, min(16 // max(1, v.dtype.itemsize), v.shape[-1]))
            self._set(v, blocked(v.shape, tuple(range(rank - 1, -1, -1)), vec, self.num_warps))
            self._drain()

    def _operand_layout(self, v: ir.Value) -> Layout | None:
        """The layout of a block operand feeding v through addptr/splat/broadcast/elementwise ops."""
        seen = 0
        while v is not None and v.owner is not None and seen < 8:
            seen += 1
            op = v.owner
            for o in op.operands:
                if o is not None and o.is_block and o.shape == v.shape and o.id in self.layout:
                    return self.layout[o.id]
            nxt = [o for o in op.operands if o is not None and o.is_block and o.shape == v.shape]
            v = nxt[-1] if nxt and op.name in ELEMENTWISE else None
        return None

    def _forward_from_anchors(self, pointers: bool = True):
        """Push anchored layouts forward through elementwise ops, reductions and shape ops before
        any default is chosen, so that e.g. a loop accumulator `acc += load(...)` takes the load's
        layout (its init and iter arg follow through the link) instead of a default that would
        need a conversion every iteration."""
        ops = list(self.fn.walk())
        changed = True
        while changed:
            changed = False
            for op in ops:
                for res in op.results:
                    # broadcasts wait for their consumer's layout (backward): guessing one here
                    # would force a conversion where the broadcast meets the anchored operand
                    if op.name == "broadcast":
                        continue
                    if res.is_block and res.id not in self.layout and (pointers or not res.dtype.is_ptr()):
                        lay = self._infer(op, res, default=False)
                        if lay is not None:
                            self._set(res, lay)
                            self._drain()
                            changed = True

    def _forward(self, block: ir.Block):
        for op in block.ops:
            for r in op.regions:
                for a in r.args:
                    if a.is_block and a.id not in self.layout:
                        self._forward_arg(op, r, a)
                self._forward(r)
            for res in op.results:
                if res.is_block and res.id not in self.layout:
                    self._set(res, self._infer(op, res))
                    self._drain()

    def _forward_arg(self, op: ir.Op, region: ir.Block, a: ir.Value):
        src = None
        if op.name == "for" and a.index >= 1:
            src = op.operands[3 + a.index - 1]
        elif op.name == "while" and region is op.regions[0]:
            src = op.operands[a.index]
        lay = self.layout.get(src.id) if src is not None else None
        self._set(a, lay or default_layout(a.shape, self.num_warps))
        self._drain()

    def _infer(self, op: ir.Op, res: ir.Value, default: bool = True) -> Layout | None:
        n = op.name
        ins = [self.layout.get(o.id) for o in op.operands if o is not None and o.is_block]
        first = next((l for l in ins if l is not None and l.shape == res.shape), None)
        if n in ELEMENTWISE and first is not None:
            return first
        if n == "reduce" and ins and ins[0] is not None:
            return ins[0].slice(op.attrs["axis"])
        if n == "scan" and first is not None:
            return first
        if n == "expand_dims" and ins and ins[0] is not None:
            return ins[0].expand(op.attrs["axis"])
        if n == "trans" and ins and ins[0] is not None:
            return ins[0].trans(tuple(op.attrs["perm"]))
        if n == "reshape" and ins and ins[0] is not None:
            return ins[0].reshape(res.shape)
        if n == "broadcast" and ins and ins[0] is not None:
            return broadcast_layout(ins[0], res.shape)
        if n == "join" and first is None and ins and ins[0] is not None:
            return ins[0].with_minor_pair()
        if n == "split" and ins and ins[0] is not None:
            return ins[0].slice(ins[0].rank - 1)
        if n == "reduce_combine" and ins and ins[0] is not None:
            return ins[0].slice(op.attrs["axis"])
        if n == "scan_combine" and first is not None:
            return first
        if n in ("gather", "flip", "sort") and first is not None:
            return first
        return default_layout(res.shape, self.num_warps) if default else None


def _fastest(lay: Layout) -> int | None:
    """The dim a thread's first elements (or, with one element, its neighbour lanes) run along."""
    for b in lay.reg + lay.lane:
        nz = [d for d, x in enumerate(b) if x]
        if nz:
            return nz[0]
    return None


def _run_bytes(lay: Layout, d: int, es: int) -> int:
    """Contiguous bytes along dim d covered by one thread's first registers and then its
    neighbour lanes (replicated lanes skipped): how well a warp's access coalesces."""
    unit = lambda v: tuple(v if i == d else 0 for i in range(lay.rank))  # noqa: E731
    n = 1
    for b in lay.reg:
        if b != unit(n):
            break
        n *= 2
    for b in lay.lane:
        if not any(b):
            continue
        if b != unit(n):
            break
        n *= 2
    return n * es


def broadcast_layout(src: Layout, shape: tuple) -> Layout:
    """A layout for `shape` that agrees with `src` (the layout of the size-1 operand) on the
    kept dims: the broadcast dims' bits go to replicated lane slots, then warp slots, then registers."""
    rank = len(shape)
    lane, warp, reg = list(src.lane), list(src.warp), list(src.reg)
    for d in range(rank):
        if src.shape[d] == 1 and shape[d] != 1:
            bits = log2(shape[d])
            nxt = 0
            for group in (lane, warp):
                for i, b in enumerate(group):
                    if nxt < bits and not any(b):
                        c = [0] * rank
                        c[d] = 1 << nxt
                        group[i] = tuple(c)
                        nxt += 1
            while nxt < bits:
                c = [0] * rank
                c[d] = 1 << nxt
                reg.append(tuple(c))
                nxt += 1
    return Layout(tuple(shape), tuple(reg), tuple(lane), tuple(warp))


# ---- layout assignment: keep the epilogue in the accumulator layout ----------------------------------

_CHEAP = {"const", "splat", "arange", "broadcast", "expand_dims"}
_EPILOGUE = {"cast", "add", "sub", "mul", "fdiv", "maximum", "minimum", "maximum_nan", "minimum_nan",
             "cmp", "select", "neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "erf", "fma"}


def _cheap(v, depth: int = 4) -> bool:
    if not v.is_block:
        return True
    op = v.owner
    if op is None or depth == 0:
        return False
    if op.name in _CHEAP:
        return all(o is None or _cheap(o, depth - 1) for o in op.operands)
    return False


def forward_epilogue(assign, dot_op) -> None:
    """After a dot result is anchored to the MMA layout: give the same layout to the elementwise
    epilogue that consumes it (activation, `.to(fp16)` …) when its other operands are constants,
    so that the conversion to the store's coalesced layout happens once, on the narrowest type
    (Triton's RemoveLayoutConversions does the same). Called by LayoutAssignment._anchors."""
    lay = assign.layout.get(dot_op.result.id)
    if lay is None or mma_kind(dot_op) is None:
        return
    users = ir.uses(assign.fn)
    inside = {m.id for m in assign.links.group(dot_op.result)}
    work = list(assign.links.group(dot_op.result))
    while work:
        v = work.pop()
        for op in users.get(v.id, ()):
            if op.name not in _EPILOGUE or len(op.results) != 1:
                continue
            r = op.result
            if not r.is_block or r.shape != lay.shape or r.id in assign.layout:
                continue
            if not all(o is None or o.id in inside or _cheap(o) for o in op.operands):
                continue
            assign._set(r, lay)
            assign._drain()
            for m in assign.links.group(r):
                if m.id not in inside:
                    inside.add(m.id)
                    work.append(m)
