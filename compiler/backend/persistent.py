"""Persistent tile loops: the next tile's first copies run under this tile's epilogue.

Tutorial 09's persistent matmuls walk their output tiles in a loop around the K loop:

    for tile_id in range(start_pid, num_tiles, NUM_SMS):
        offs_am, offs_bn = <index arithmetic of tile_id>
        acc = zeros; for ki in range(k_tiles): acc = dot(a_desc.load(...), b_desc.load(...), acc)
        c_desc.store(..., acc.to(fp16))                                          # the epilogue

Lowered one tile at a time, the K loop fills its stages (prologue), computes, drains, and the
epilogue runs with the copy engine idle; then the next tile's prologue waits a global-memory
latency with the tensor cores idle. Triton overlaps the two: the next tile's loads are issued
before the epilogue. Here, when the inner loop is a TMA-fed wgmma loop (multi_dot.py) whose copies
depend, outside the K loop, only on index arithmetic of the tile loop's induction variable:
  before the tile loop  the stages' mbarriers initialized once; the first tile's S-1 stages issued
  each tile           the K loop without prologue, its stage counter carried from tile to tile
                      (pipeline.Chain: stage i % S, phase (i / S) & 1 over the whole program);
                      its last S-1 iterations copy the next tile's S-1 stages where they would
                      copy past the end (its index arithmetic re-lowered with tile_id + step once
                      before the K loop, nothing past the last tile), as Triton's flattened loop;
                      then the epilogue, its shared memory (the TMA store's tile, conversions)
                      above the stages
  after the tile loop  the barriers invalidated.
The stages must leave room for the epilogue (else the loop is lowered as before). When nothing in
the tile loop but its TMA stores uses shared memory beside the stages (registers-only epilogue
arithmetic, _registers_only), a store's wait for the copy engine to have read its tile moves to
the next store (tma.py, lw.defer_store_wait): the store runs on under the next tile's K loop.
"""
from __future__ import annotations

import math

from llvmlite import ir as ll

from .. import ir
from . import multi_dot, pipeline, tma, warp_specialize
from .llvm_types import I32, esize, is_signed, lty

# the epilogue's shared memory: a TMA store's tile, or a conversion (chunked to this: lowering.py)
from .lowering import CONVERT_CHUNK_BYTES


# ops whose lowering stays in registers when every block operand already has the result's layout
_IN_REGISTERS = frozenset(ir.BINARY_OPS) | {"cast", "fma", "select", "neg", "abs", "not", "splat", "const"}


class _Tiles:
    pass


def _registers_only(lw, t, body) -> bool:
    """Nothing in the tile loop's body touches shared memory but the K loop's stages and the TMA
    stores: the K loop's other ops are scalar, the rest keep their blocks in registers."""
    plan, inner = t.plan, t.inner
    ibody = inner.regions[0]
    for o in ibody.ops:
        if o is ibody.terminator or o in plan.skip or o in plan.dots:
            continue
        if any(r.is_block for r in o.results) or o.regions:
            return False
    carried = {r.id: lw.slot_layout(a) for r, a in zip(inner.results, ibody.args[1:])}
    for o in body.ops:
        if o is body.terminator or o is inner or o.name == "tma_store" or not any(r.is_block for r in o.results):
            continue
        if o.name not in _IN_REGISTERS or o.regions:
            return False
        want = lw.want(o.result)
        for v in o.operands:
            if v is not None and v.is_block and carried.get(v.id, lw.want(v)) != want:
                return False   # a layout conversion, through shared memory
    return True


def _plan_inner(lw, inner):
    """multi_dot's plan for the K loop, looked at before the tile loop's body is lowered: its step,
    when a constant of that body, bound for the look."""
    step = inner.operands[2]
    if step.id in lw.vals:
        return multi_dot.make_plan(lw, inner)
    if step.owner is None or step.owner.name != "const" or step.is_block:
        return None
    lw.vals[step.id] = ll.Constant(lty(step.dtype), int(step.owner.attrs["value"]))
    try:
        return multi_dot.make_plan(lw, inner)
    finally:
        del lw.vals[step.id]


def _find(lw, op):
    if op.attrs.get("warp_specialize") or lw.ws is not None:
        return None
    step = lw.scalar(op.operands[2])
    if not (isinstance(step, ll.Constant) and isinstance(step.constant, int) and step.constant > 0):
        return None   # the tile loop's `next < ub` below takes a positive step
    body = op.regions[0]
    y = body.terminator
    if y is None or y.name != "yield":
        return None
    with_regions = [o for o in body.ops if o.regions]
    if len(with_regions) != 1 or with_regions[0].name != "for":
        return None
    inner = with_regions[0]
    ops = [o for o in body.ops if o is not y]
    after = ops[ops.index(inner) + 1:]
    if any(o.name in ("dot", "tma_load", "make_tensor_map") for o in after):
        return None
    plan = _plan_inner(lw, inner)
    if (plan is None or plan.side_loads or plan.n_pinned or plan.needed
            or any(lo.name != "tma_load" for lo in plan.loads) or warp_specialize.applies(lw, inner, plan)):
        return None
    # what the copies of a tile read from outside the K loop: the loop's bounds and step, and the
    # operands of its address arithmetic and of its TMA loads defined in the tile loop's body
    ibody = inner.regions[0]
    inside = {a.id for a in ibody.args} | {r.id for o in ibody.walk() for r in o.results}
    used = list(inner.operands[:3]) + [v for o in list(plan.addr_ops) + list(plan.loads) for v in o.operands
                                       if v is not None and v.id not in inside]
    own = {r.id for o in ops for r in o.results} | {body.args[0].id}
    targets = list({v.id: v for v in used if v.id in own}.values())
    if any(v.is_block for v in targets):
        return None
    sl = pipeline._slice(body, targets, lw.rules.by_layout)
    if sl is None or sl[1] - {body.args[0].id}:
        return None   # the tile's copies depend on more than the tile loop's induction variable
    t = _Tiles()
    t.inner, t.plan, t.slice_ops, t.targets = inner, plan, sl[0], targets
    t.defer_store_wait = _registers_only(lw, t, body)
    if multi_dot.stages_end(lw, plan) + _epilogue_bytes(t, ops) > pipeline.SMEM_LIMIT:
        return None
    return t


def _epilogue_bytes(t, ops) -> int:
    """A bound on the shared memory the tile loop's body takes above the stages: its TMA stores'
    tiles, and where a block may change layout, any block of it in a row-major buffer with a
    16-byte pad a row (lowering.Lowering.convert; chunked ones take less)."""
    need = [tma.tile_for(o.operands[-1]).nbytes for o in ops if o.name == "tma_store"]
    if not t.defer_store_wait:
        blocks = [v for o in ops if o is not t.inner for v in list(o.operands) + list(o.results)
                  if v is not None and v.is_block]
        for v in blocks:
            n = math.prod(v.shape)
            es = 8 if v.dtype.is_ptr() else max(1, esize(v.dtype))
            need.append(n * es + n // v.shape[-1] * 16)
        need.append(CONVERT_CHUNK_BYTES)
    return max(need, default=0)


class _Tile:
    """The copies of one tile: its index arithmetic (the tile loop's body up to the K loop,
    re-lowered with the tile's induction value) evaluated once, where the tile is `live` (i1)."""

    def __init__(self, lw, t, body, tile_iv, live):
        self.lw, self.t, self.live = lw, t, live
        vals = pipeline._eval(lw, t.slice_ops, {body.args[0].id: tile_iv}, [(v, None) for v in t.targets])
        self.state = {v.id: x for v, x in zip(t.targets, vals)}
        self.lb, self.ub, self.step = (self.state[v.id] if v.id in self.state else lw.scalar(v)
                                       for v in t.inner.operands[:3])

    def stage(self, j, slot, base, pred=None) -> None:
        """Its K loop's stage j (int or i32) into buffer `slot` at byte offset `base`, where the
        i1 `pred` holds (none past its K loop's end)."""
        b, inner = self.lw.b, self.t.inner
        if isinstance(j, int):
            j = ll.Constant(I32, j)
        iv = b.add(self.lb, b.mul(self.step, j if j.type == self.step.type else b.sext(j, self.step.type)))
        live = self.live if pred is None else b.and_(self.live, pred)
        pipeline._issue(self.lw, self.t.plan, inner.regions[0], iv, self.state, slot, base, self.ub,
                        is_signed(inner.operands[0].dtype), live_too=live)


def lower_for(lw, op) -> bool:
    """Lower a qualifying tile loop (see the module doc); False (nothing emitted) otherwise."""
    t = _find(lw, op)
    if t is None:
        return False
    plan = t.plan
    b = lw.b
    body = op.regions[0]
    reserved_before = lw.smem_reserved
    emit_dot = multi_dot.place_stages(lw, plan)   # the tile loop's own uses go above the stages
    plan.cp_async, plan.tma, plan.n_tma = False, True, len(plan.loads)
    lb, ub, step = (lw.scalar(o) for o in op.operands[:3])
    signed = is_signed(op.operands[0].dtype)

    def before(x, y):
        return b.icmp_signed("<", x, y) if signed else b.icmp_unsigned("<", x, y)

    tma.init_barriers(lw, plan.barriers, plan.stages * plan.n_tma)
    first = _Tile(lw, t, body, lb, before(lb, ub))
    for s in range(plan.dist):
        first.stage(s, s, s * plan.stage_bytes)
    lays = [lw.slot_layout(a) for a in body.args[1:]]
    init_regs = [lw.get_as(v, l) for v, l in zip(op.operands[3:], lays)]
    lw.open_hoist(body)
    header, exitb, iv, phis = lw.loop_head("tiles", lb, ub, step, [[ll.Constant(I32, 0)]] + init_regs, signed)
    lw.vals[body.args[0].id] = iv
    for a, l, ps in zip(body.args[1:], lays, phis[1:]):
        lw.bind(a, l, ps)
    lw.scopes.append({})
    lw.defer_store_wait = t.defer_store_wait
    try:
        for bop in body.ops:
            if bop is body.terminator:
                break
            if bop is not t.inner:
                lw.lower_op(bop)
                continue
            nxt = b.add(iv, step)
            chain = pipeline.Chain(phis[0][0], _Tile(lw, t, body, nxt, before(nxt, ub)).stage)
            pipeline.pipelined_loop(lw, bop, plan, emit_dot, chain)
        nexts = [[chain.end]] + [lw.get_as(yv, l) for yv, l in zip(body.terminator.operands, lays)]
    finally:
        lw.scopes.pop()
        lw.defer_store_wait = False
    lw.loop_back(header, iv, step, phis, nexts)
    lw.close_hoist()
    b.position_at_end(exitb)
    if t.defer_store_wait:
        tma.wait_stores_read(lw)
    lw.barrier()
    tma.invalidate_barriers(lw, plan.barriers, plan.stages * plan.n_tma)
    lw.smem_reserved = max(reserved_before, lw.kernel_pins_end)
    for r, l, ps in zip(op.results, lays, phis[1:]):
        lw.bind(r, l, ps)
    return True
