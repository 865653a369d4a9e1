"""Software pipelining of `for` loops that feed a tensor-core dot (Triton's num_stages).

A loop qualifies when its body holds one mma dot (fp16/bf16, fp8, int8) whose two operands are loads made in
the body, used by nothing else, masked with `other` = 0 (or unmasked), whose pointer and mask
depend only on the induction variable, loop invariants and iter args whose own updates (the
yield) are pure index arithmetic — Triton's tutorial loop `a = tl.load(a_ptrs, mask=…, other=0.0);
…; a_ptrs += BLOCK_K * stride_ak`.

Such loads are not lowered to registers. Instead, with S = num_stages buffers of (A tile, B tile)
in swizzled shared memory (dot_layouts.SmemTile):
  prologue   for s in 0 … D-1: cp.async the tiles of iteration s into buffer s; commit (after each tile)
  iteration i: cp.async.wait_group((D-1)·L); bar.sync       (tiles of i have landed; L loads)
             cp.async the tiles of iteration i+D into buffer (i+D) % S; commit (after each tile)
             ldmatrix + mma.sync (or wgmma) from buffer i % S
  exit       cp.async.wait_group(0); bar.sync
with D = S-1. With wgmma kept asynchronous (the accumulator only carried), the order is Triton's:
  iteration i: cp.async.wait_group((D-1)·L); bar.sync
             wgmma from buffer i % S; commit; wgmma.wait_group(1)   (wgmma(i-1) is done, i runs on)
             bar.sync                          (every warpgroup is past its wgmma(i-1))
             cp.async the tiles of iteration i+S-1 into buffer (i-1) % S; commit
so D = S-1 stays in flight while the tensor cores work (S ≥ 2); issuing the copies before the
wgmma, or between its commit and its wait, keeps one barrier but only S-2 stages ahead, and measured
slower (docs/performance.md). The exit waits for the last wgmma group. No proxy fence between the
cp.async writes and the wgmma reads, as in Triton's PTX (one per iteration measured 1-7 % slower).
The pointers/masks of iteration i+S-1 come from re-lowering the body's index arithmetic with the
induction variable and the "ahead" copies of the iter args it needs (carried as extra phis and
advanced by re-lowering their yield expressions). Copies past the end are predicated off
(src-size 0). Masked-off elements are zero-filled by cp.async's src-size operand.
`options.pipeline` (knobs.codegen.pipeline; BLOCKTUNE_NO_PIPELINE=1) turns this off: the dot then
stages its operands through registers.

TMA loads (`tma_load`, a tensor descriptor on sm_90: tma.py) in a plan (multi_dot.py takes them)
are copied by the bulk tensor copy engine instead: one mbarrier per stage (initialized before the
prologue, invalidated after the exit); thread 0 arms the stage's barrier with its tiles' bytes and
issues the copies where the other loads would issue cp.async; iteration i waits on barrier i % S
for the phase of parity (i / S) & 1 — the stage's (i / S)-th completion — where it would wait for
the cp.async group, and without the bar.sync after it when the copies are issued after the body's
(wgmma in flight). Copies past the end are not issued (their stage is never waited for).
"""
from __future__ import annotations

from llvmlite import ir as ll

from .. import ir
from . import dot, f16_accumulator, pinned_tma, tma, wgmma
from .dot_layouts import is_fp8_kind, mma_kind, operand_tiles, register_groups, tiles_end, uses_wgmma
from .layouts import log2
from .llvm_types import esize, is_signed
from .lowering import SMEM_LIMIT
from .memory import access_width

I32 = ll.IntType(32)
_MISSING = object()


class Plan:
    pass


def _zero_const(v) -> bool:
    if v is None:
        return True
    op = v.owner
    if op is None:
        return False
    if op.name == "const":
        try:
            return float(op.attrs["value"]) == 0.0
        except (TypeError, ValueError):
            return False
    if op.name in ("splat", "broadcast"):
        return _zero_const(op.operands[0])
    return False


def _slice(body: ir.Block, targets, poly) -> tuple | None:
    """(ops of `body` needed to compute `targets` in body order, ids of body args they read),
    or None when that needs an op that is not pure index arithmetic."""
    defs = {r.id: op for op in body.ops for r in op.results}
    arg_ids = {a.id for a in body.args}
    seen, ops, args = set(), set(), set()
    stack = [t for t in targets if t is not None]
    while stack:
        v = stack.pop()
        if v.id in seen:
            continue
        seen.add(v.id)
        if v.id in arg_ids:
            args.add(v.id)
            continue
        op = defs.get(v.id)
        if op is None:
            continue  # defined before the loop
        if op.name not in poly or op.regions:
            return None
        ops.add(op)
        stack.extend(o for o in op.operands if o is not None)
    return [op for op in body.ops if op in ops], args


def loop_stages(lw, op) -> int | None:
    """The pipeline depth of a `for` that may be pipelined (the switch on, num_stages ≥ 2, a
    constant positive step, a plain yield), else None."""
    if not lw.options.pipeline:
        return None
    stages = op.attrs.get("num_stages") or lw.options.num_stages or 1
    if stages < 2:
        return None
    step = lw.scalar(op.operands[2])
    if not (isinstance(step, ll.Constant) and isinstance(step.constant, int) and step.constant > 0):
        return None
    y = op.regions[0].terminator
    if y is None or y.name != "yield":
        return None
    return stages


def make_plan(lw, op) -> Plan | None:
    stages = loop_stages(lw, op)
    if stages is None:
        return None
    body = op.regions[0]
    y = body.terminator
    dots = [o for o in body.ops if o.name == "dot"]
    if len(dots) != 1 or (mma_kind(dots[0]) not in ("f16", "bf16", "s8") and not is_fp8_kind(mma_kind(dots[0]))):
        return None
    d = dots[0]
    top = set(body.ops)
    loads = []
    for v in d.operands[:2]:
        lo = v.owner
        if lo is None or lo.name != "load" or lo not in top or not v.is_block or lo.attrs.get("volatile"):
            return None
        if any(u is not d for u in lw.uses.get(v.id, ())):
            return None
        if not _zero_const(lo.operands[2]):
            return None
        loads.append(lo)
    if loads[0] is loads[1]:
        return None
    addr = address_slices(lw, body, loads)
    if addr is None:
        return None
    # copy widths and tiles
    lays, vecs = [], []
    for lo in loads:
        lay = lw.want(lo.result)
        lays.append(lay)
    ta, tb = operand_tiles(d, lays[0], lays[1], lw.options)
    for lo, lay, tile in zip(loads, lays, (ta, tb)):
        es = esize(lo.result.dtype)
        v = access_width(lw, lay, lo.operands[0], lo.operands[1], es)
        v = min(v, _smem_vec(lay, tile))
        if v * es not in (4, 8, 16):
            return None
        vecs.append(v)
    stage_bytes = (tiles_end(ta, tb) + 1023) // 1024 * 1024
    stages = min(stages, (SMEM_LIMIT - lw.smem_reserved) // stage_bytes)   # above pinned tiles
    if stages < 2:
        return None
    p = Plan()
    p.dot, p.loads, p.lays, p.vecs, p.tiles = d, loads, lays, vecs, (ta, tb)
    p.stages, p.stage_bytes = stages, stage_bytes
    # wgmma kept in flight across iterations (wait_group 1): needs the accumulator to be the dot's
    # own iter arg, yielded and used by nothing else, and one more buffer (the one it still reads)
    p.async_dot = False
    if uses_wgmma(d, lw.options) and lw.options.wgmma == "async" and f16_accumulator.result_is_accumulator(d):
        c = d.operands[2]
        if c.owner is None and c in body.args[1:]:
            i = body.args.index(c) - 1
            if y.operands[i] is d.result and all(u is y for u in lw.uses.get(d.result.id, ())):
                p.async_dot, p.acc_index = True, i
    # prefetch distance: iterations whose tiles are in flight ahead of the one computed
    p.dist = stages - 1
    p.addr_ops, p.upd_ops, p.needed = addr
    p.skip, p.dots = set(loads), {d}
    p.side = {}
    return p


def address_operands(lo) -> list:
    """What a pipelined load's address depends on: pointer and mask, or a TMA load's tensor map
    (an iter arg where the descriptor is loop-carried) and offsets."""
    return lo.operands if lo.name == "tma_load" else lo.operands[:2]


def address_slices(lw, body, loads):
    """(ops computing the loads' pointers and masks, ops advancing the iter args they read, the
    indices of those iter args), or None when that takes more than pure index arithmetic."""
    y = body.terminator
    iv = body.args[0]
    index_of = {a.id: i for i, a in enumerate(body.args[1:])}
    targets = [o for lo in loads for o in address_operands(lo) if o is not None]
    sl = _slice(body, targets, lw.rules.by_layout)
    if sl is None:
        return None
    needed = {a for a in sl[1] if a != iv.id}
    queue = list(needed)
    while queue:
        aid = queue.pop()
        s2 = _slice(body, [y.operands[index_of[aid]]], lw.rules.by_layout)
        if s2 is None:
            return None
        for a in s2[1]:
            if a != iv.id and a not in needed:
                needed.add(a)
                queue.append(a)
    needed_idx = sorted(index_of[a] for a in needed)
    upd = _slice(body, [y.operands[i] for i in needed_idx], lw.rules.by_layout)
    if upd is None:
        return None
    return sl[0], upd[0], needed_idx


def _smem_vec(lay, tile) -> int:
    """Elements per 16-byte-or-less contiguous shared-memory run of the layout's register groups."""
    reg_off = [tile.offset(c) for c in lay.reg]
    tmask = 0
    for c in lay.lane + lay.warp:
        tmask |= tile.offset(c)
    v, k = 1, 0
    while k < len(reg_off) and reg_off[k] == 1 << k and (v * 2) <= tile.vec:
        k += 1
        v *= 2
    while v > 1 and (tmask & (v - 1) or any(o & (v - 1) for o in reg_off[log2(v):])):
        v //= 2
    return v


def _eval(lw, ops, bindings: dict, requests):
    """Lower `ops` (pure index arithmetic of the loop body) with body arguments bound to
    `bindings` (value id → scalar llvm value or (Layout, regs)); return the requested values
    [(ir value, layout | None)] and restore the lowering's state."""
    saved = {}
    for vid, val in bindings.items():
        saved[vid] = lw.vals.get(vid, _MISSING)
        lw.vals[vid] = val
    for op in ops:
        for r in op.results:
            saved.setdefault(r.id, lw.vals.get(r.id, _MISSING))
    lw.scopes.append({})
    try:
        for op in ops:
            rule = lw.rules.by_layout[op.name]
            res = op.result
            if res.is_block:
                lay = lw.want(res)
                lw.set_block(res, lay, rule(lw, op, lay))
            else:
                lw.vals[res.id] = rule(lw, op, None)
        out = [lw.block(v, lay) if lay is not None else lw.scalar(v) for v, lay in requests]
    finally:
        lw.scopes.pop()
        for vid, val in saved.items():
            if val is _MISSING:
                lw.vals.pop(vid, None)
            else:
                lw.vals[vid] = val
    return out


def _issue(lw, plan: Plan, body, iv_val, state: dict, slot, slot_base, ub, signed: bool, live_too=None):
    """cp.async (or TMA) the operand tiles of the iteration whose induction value is `iv_val` (iter
    args bound by `state`) into stage `slot` at byte offset `slot_base` (ints or i32 values); none
    past `ub`, nor where the i1 `live_too` is false."""
    b = lw.b
    bindings = dict(state)
    bindings[body.args[0].id] = iv_val
    reqs = []
    for lo, lay in zip(plan.loads, plan.lays):
        if lo.name == "tma_load":
            reqs.extend((o, None) for o in lo.operands)
            continue
        reqs.append((lo.operands[0], lay))
        if lo.operands[1] is not None:
            reqs.append((lo.operands[1], lay))
    vals = _eval(lw, plan.addr_ops, bindings, reqs)
    live = b.icmp_signed("<", iv_val, ub) if signed else b.icmp_unsigned("<", iv_val, ub)
    if live_too is not None:
        live = b.and_(live, live_too)
    i = 0
    copies = []
    for lo, lay, v, tile in zip(plan.loads, plan.lays, plan.vecs, plan.tiles):
        if lo.name == "tma_load":
            n = len(lo.operands)
            dst = tma.smem_address(lw, b.add(slot_base if not isinstance(slot_base, int) else ll.Constant(I32, slot_base),
                                              ll.Constant(I32, lw.smem_reserved + tile.base)))
            copies.append((vals[i], vals[i + 1:i + n], tma.tile_for(lo.result, tile.base), dst))
            i += n
            continue
        ptrs = vals[i]
        i += 1
        masks = None
        if lo.operands[1] is not None:
            masks = vals[i]
            i += 1
        es = tile.es
        nbytes = v * es
        lane_off = tuple(tile.offset(c) for c in lay.lane)
        warp_off = tuple(tile.offset(c) for c in lay.warp)
        tv, tm = lw.linear(lane_off, warp_off)
        reg_off = [tile.offset(c) for c in lay.reg]
        name = "llvm.nvvm.cp.async.cg.shared.global.16.s" if nbytes == 16 else f"llvm.nvvm.cp.async.ca.shared.global.{nbytes}.s"
        fn = lw.intrinsic(name, ll.VoidType(), [ll.PointerType(addrspace=3), ll.PointerType(addrspace=1), I32])
        slot_off = slot_base if not isinstance(slot_base, int) else ll.Constant(I32, slot_base)
        consts = [c for _, c in register_groups(reg_off, lay.n_regs, v)]
        # wgmma: one address register per tile (this thread's part plus the stage) and each copy a
        # constant offset from it, folded into the instruction (16-30 fewer registers than one
        # hoisted sum per copy); needs no constant to share a bit with the thread's part. The
        # mma.sync configs measured no better that way (64×32×32 w2: 94 → 116 registers).
        thread_ptr = None
        if all(uses_wgmma(d, lw.options) for d in plan.dots) and tv is not None and not any(c & tm for c in consts):
            thread_ptr = lw.smem_ptr(b.add(b.mul(tv, ll.Constant(I32, es)), slot_off))
        # an element a layout replicates is copied by each of its holders, the same bytes (the
        # same data, or the same zero-fill: mask and bounds are the element's) to the same place
        for g, c in zip(range(0, lay.n_regs, v), consts):
            if thread_ptr is not None:
                dst = b.gep(thread_ptr, [ll.Constant(I32, c * es + tile.base)], inbounds=True, source_etype=ll.IntType(8))
            else:
                off = lw.combine_const(tv, tm, c)
                byte = b.add(b.mul(off, ll.Constant(I32, es)), ll.Constant(I32, tile.base))
                dst = lw.smem_ptr(b.add(byte, slot_off))
            pred = live if masks is None else b.and_(live, masks[g])
            size = b.select(pred, ll.Constant(I32, nbytes), ll.Constant(I32, 0))
            b.call(fn, [dst, ptrs[g], size])
        lw.call("llvm.nvvm.cp.async.commit.group", ll.VoidType(), [])   # one group a load (see cp_async_groups)
    if copies and len(plan.dots) > 1:
        # attention's copies sit between or after its dots: one lane of warp 0 (elect.sync) arms each
        # tile's mbarrier and starts its copies, each instruction predicated — no branch, and no
        # loop of ptxas's over the lanes around each copy (D128 128x64 w4: 612 → 599 SASS an iteration)
        go = b.and_(live, tma.elected_by_warp0(lw))
        for j, copy in enumerate(copies):
            tma.issue_copies(lw, [copy], stage_barrier(lw, plan, slot, j), pred=go)
    elif copies:   # thread 0 arms each tile's mbarrier and starts its copies (none past the end)
        with b.if_then(b.and_(live, tma.elected(lw))):
            for j, copy in enumerate(copies):
                tma.issue_copies(lw, [copy], stage_barrier(lw, plan, slot, j))


def cp_async_groups(plan: Plan) -> int:
    """cp.async groups an iteration commits: one a load, as Triton's pipeliner does, so that
    `cp.async.wait_group` counts what Triton's does (its test_tl_range_num_stages reads the count:
    6 for num_stages=5 and two loads). Waiting for iteration i's tiles is the same point either way."""
    return sum(lo.name == "load" for lo in plan.loads)


def stage_barrier(lw, plan: Plan, slot, j: int):
    """The i32 shared address of the mbarrier of the j-th TMA tile of stage `slot`: one a tile, so
    that a dot waits only for the tiles it reads (attention's QKᵀ not for V)."""
    n = plan.n_tma
    off = (slot * n + j) * tma.MBARRIER_BYTES if isinstance(slot, int) else \
        lw.b.mul(lw.b.add(lw.b.mul(slot, ll.Constant(I32, n)), ll.Constant(I32, j)), ll.Constant(I32, tma.MBARRIER_BYTES))
    return tma.smem_address(lw, lw.b.add(ll.Constant(I32, plan.barriers), off) if not isinstance(off, int)
                            else plan.barriers + off)


def wait_tile(lw, plan: Plan, j: int) -> None:
    """Wait (once an iteration) for the j-th TMA tile of the stage this iteration reads; nothing
    where the loop waits for its stages otherwise (warp_specialize.py's full barriers)."""
    if getattr(plan, "waited", None) is not None and j not in plan.waited:
        plan.waited.add(j)
        tma.wait(lw, stage_barrier(lw, plan, plan.read_slot, j), plan.parity)


def _advance(lw, plan: Plan, body, iv_val, state: dict, lays):
    """The needed iter args of the next iteration (their yield expressions, re-lowered)."""
    bindings = dict(state)
    bindings[body.args[0].id] = iv_val
    y = body.terminator
    reqs = [(y.operands[i], lays[i]) for i in plan.needed]
    vals = _eval(lw, plan.upd_ops, bindings, reqs)
    out = {}
    for i, regs in zip(plan.needed, vals):
        out[body.args[i + 1].id] = (lays[i], regs) if lays[i] is not None else regs
    return out


def lower_for(lw, op) -> bool:
    """Lower a qualifying `for` with a cp.async pipeline; False (nothing emitted) otherwise."""
    plan = make_plan(lw, op)
    if plan is None:
        return False
    lw.smem_bytes = max(lw.smem_bytes, plan.stages * plan.stage_bytes)

    def emit_dot(bop, read_base):
        if plan.async_dot:
            wgmma.dot_from_tiles(lw, bop, plan.tiles[0], plan.tiles[1], read_base, pending=1)
        else:
            dot.dot_from_tiles(lw, bop, plan.tiles[0], plan.tiles[1], dyn_base=read_base)

    pipelined_loop(lw, op, plan, emit_dot)
    return True


def lower_body(lw, plan: Plan, body, lays, emit_dot, read_base) -> list:
    """Lower one iteration's body in its own scope — its loads in plan.skip left out, its side
    loads (plan.side) read from the stage, its dots in plan.dots `emit_dot(dot op, read_base)` —
    and return the registers it yields, in `lays`."""
    lw.scopes.append({})
    try:
        term = None
        for bop in body.ops:
            if bop.name in ("yield", "condition"):
                term = bop
                break
            if bop in plan.side:   # copied with the tiles: read in the layouts its users want
                lw.bind_smem_block(bop.result, lw.want(bop.result), plan.side[bop], read_base)
                continue
            if bop in plan.skip:
                continue
            if bop in plan.dots:
                emit_dot(bop, read_base)
                continue
            lw.lower_op(bop)
        ys = term.operands if term is not None else []
        return [lw.get_as(yv, l) for yv, l in zip(ys, lays)]
    finally:
        lw.scopes.pop()


class Chain:
    """A TMA loop run once per tile of a loop around it (persistent.py): its barriers initialized
    and its first stages issued by the caller, the stage counter carried from one run to the next
    (`start`: the i32 count of stages used before this run; `end`, set by the run: after it).
    `next_stage(j, slot, byte offset, i1)` issues stage j (i32) of the next run where the i1
    holds. The next run's first S-1 stages go where this run's copies would go past its end: the
    iteration whose copies ahead are for iteration n + j (n iterations) takes the next run's
    stage j instead, into the same buffer; the stages j < S-1-n that no iteration reached are
    issued at the exit as soon as their buffers are free — with a wgmma still in flight, right
    away (every warp is past the last iteration's bar.sync, which followed its wait for all but
    that wgmma, whose buffer is not among them), else after the exit's bar.sync."""

    def __init__(self, start, next_stage):
        self.start, self.end, self.next_stage = start, None, next_stage

    def stages_at_exit(self, lw, plan: Plan, it) -> None:
        b = lw.b
        n = b.sub(it, self.start)
        for j in range(plan.dist):
            slot = b.urem(b.add(it, ll.Constant(I32, j)), ll.Constant(I32, plan.stages))
            self.next_stage(ll.Constant(I32, j), slot, b.mul(slot, ll.Constant(I32, plan.stage_bytes)),
                            b.icmp_signed("<", b.add(n, ll.Constant(I32, j)), ll.Constant(I32, plan.dist)))


def pipelined_loop(lw, op, plan: Plan, emit_dot, chain: Chain | None = None) -> None:
    """The loop of `plan` (see the module doc): the prologue's copies, then each iteration's wait,
    barrier and copies ahead around the body, whose loads in plan.skip are not lowered and whose
    dots in plan.dots are `emit_dot(dot op, byte offset of the stage it reads)`. Ends with every
    copy landed and a barrier. With a `chain` (TMA only), no barrier set-up, prologue or tear-down:
    the caller's."""
    S = plan.stages
    D = plan.dist
    lb, ub, step = (lw.scalar(o) for o in op.operands[:3])
    inits = op.operands[3:]
    body = op.regions[0]
    b = lw.b
    lays = [lw.slot_layout(a) for a in body.args[1:]]
    init_regs = [lw.get_as(v, l) for v, l in zip(inits, lays)]
    if plan.async_dot:
        init_regs[plan.acc_index] = wgmma.held_in_registers(lw, init_regs[plan.acc_index])
    signed = is_signed(op.operands[0].dtype)

    def as_binding(i, regs):
        return (lays[i], regs) if lays[i] is not None else regs[0]

    # prologue: iterations 0 … S-2
    state = {body.args[i + 1].id: as_binding(i, init_regs[i]) for i in plan.needed}
    iv_s = lb
    plan.cp_async = any(lo.name == "load" for lo in plan.loads)
    plan.tma = not all(lo.name == "load" for lo in plan.loads)
    plan.n_tma = sum(lo.name == "tma_load" for lo in plan.loads)
    lw.open_hoist(body)   # ahead of the barrier: hoisted conversions may use the buffers' space
    if chain is not None:
        assert plan.tma and not plan.cp_async and not plan.needed
    elif plan.tma:  # (with the bar.sync before: the buffers may alias shared memory used just before)
        tma.init_barriers(lw, plan.barriers, S * plan.n_tma)
    else:
        lw.barrier()  # the buffers may alias shared memory used just before the loop
    for s in range(D if chain is None else 0):
        _issue(lw, plan, body, iv_s, state, s, s * plan.stage_bytes, ub, signed)
        state = _advance(lw, plan, body, iv_s, state, lays)
        iv_s = b.add(iv_s, step)
    pinned_tma.wait_pending(lw)   # a pinned operand's own copy (attention's Q), after these started

    ahead_init = []
    for i in plan.needed:
        cur = state[body.args[i + 1].id]
        ahead_init.append(cur[1] if isinstance(cur, tuple) else [cur])
    # phis: the stage counter, the loop's own iter args, and the "ahead" copies of the ones the
    # copies' addresses need
    it0 = ll.Constant(I32, 0) if chain is None else chain.start
    header, exitb, iv, all_phis = lw.loop_head("pfor", lb, ub, step, [[it0]] + init_regs + ahead_init, signed)
    it = all_phis[0][0]
    phis = all_phis[1:1 + len(init_regs)]
    ahead_phis = dict(zip(plan.needed, all_phis[1 + len(init_regs):]))

    lw.vals[body.args[0].id] = iv
    for a, l, ps in zip(body.args[1:], lays, phis):
        lw.bind(a, l, ps)
    sconst = ll.Constant(I32, S)
    if plan.cp_async:   # the tiles of iteration i landed: those of the D-1 iterations after it may still be in flight
        lw.call("llvm.nvvm.cp.async.wait.group", ll.VoidType(), [ll.Constant(I32, (D - 1) * cp_async_groups(plan))])
    # TMA: the k-th use of a stage (k = it / S) completes its barriers' phase k; each tile is
    # waited for where it is first read (wait_tile), else here
    if plan.tma:
        plan.read_slot, plan.waited = b.urem(it, sconst), set()
        plan.parity = b.and_(b.udiv(it, sconst), ll.Constant(I32, 1))
        if not getattr(plan, "lazy_waits", False):
            for j in range(plan.n_tma):
                wait_tile(lw, plan, j)
    if plan.cp_async or not plan.async_dot:
        # cp.async: the other threads' copies; copies issued next (below): every warp past the
        # previous iteration's reads. TMA with the copies issued after the body's own bar.sync
        # needs neither: each thread's wait makes the tiles visible to it
        lw.barrier()
    read_base = b.mul(b.urem(it, sconst), ll.Constant(I32, plan.stage_bytes))
    write_slot = b.urem(b.add(it, ll.Constant(I32, D)), sconst)
    write_base = b.mul(write_slot, ll.Constant(I32, plan.stage_bytes))
    iv_ahead = b.add(iv, b.mul(step, ll.Constant(step.type, D)))
    ahead = {body.args[i + 1].id: as_binding(i, ahead_phis[i]) for i in plan.needed}

    def issue_ahead():
        _issue(lw, plan, body, iv_ahead, ahead, write_slot, write_base, ub, signed)
        if chain is not None:   # past this run's end: the next run's stage (iv_ahead - ub) / step
            past = b.icmp_signed(">=", iv_ahead, ub) if signed else b.icmp_unsigned(">=", iv_ahead, ub)
            j = b.sub(iv_ahead, ub)
            if not (isinstance(step, ll.Constant) and step.constant == 1):
                j = b.udiv(j, step)
            chain.next_stage(b.trunc(j, I32) if j.type != I32 else j, write_slot, write_base, past)
        return _advance(lw, plan, body, iv_ahead, ahead, lays)

    read_first = getattr(plan, "read_first", None)
    if read_first is not None:   # load_pipeline.py: the copies ahead go into the buffer read here
        read_first(lw, plan, read_base)
        lw.barrier()
    if not plan.async_dot:
        ahead_next = issue_ahead()

    # TMA tiles of several dots (attention: QKᵀ, then P·V in flight over the back edge) in two
    # stages: the first dot's wait completes the previous iteration's last dot, the last reader of
    # buffer (i-1) % S, so its copies go out there (multi_dot calls plan.after_first_wait) — the
    # softmax's time for them to land, where after the body they had none. With more stages they
    # have an iteration already, and issuing them there would hold the softmax up (measured: three
    # stages at one program an SM 0.88-0.91x Triton that way): after the body, under P·V, as Triton
    early = {}
    if (plan.async_dot and plan.tma and not plan.cp_async and getattr(plan, "first_dot", None) is not None
            and S == 2):
        def issue_after_first_wait():
            lw.barrier()   # every warpgroup past its wait
            early["next"] = issue_ahead()
        plan.after_first_wait = issue_after_first_wait
    nxt = lower_body(lw, plan, body, lays, emit_dot, read_base)
    plan.after_first_wait = None
    if early:
        ahead_next = early["next"]
    elif plan.async_dot:
        # wgmma(i-1) is done in this warpgroup (wait_group 1 in the dot); once every warpgroup is
        # past that point its buffer, (i-1) % S = (i+S-1) % S, takes the tiles of iteration i+S-1
        lw.barrier()
        ahead_next = issue_ahead()
    ahead_regs = []
    for i in plan.needed:
        v = ahead_next[body.args[i + 1].id]
        ahead_regs.append(v[1] if isinstance(v, tuple) else [v])
    lw.loop_back(header, iv, step, all_phis, [[b.add(it, ll.Constant(I32, 1))]] + nxt + ahead_regs)

    lw.close_hoist()
    for lo in plan.side:
        del lw.smem_backed[lo.result.id]
    b.position_at_end(exitb)
    if chain is not None:
        chain.end = it
        if plan.async_dot:
            chain.stages_at_exit(lw, plan, it)
    if plan.cp_async:
        lw.call("llvm.nvvm.cp.async.wait.group", ll.VoidType(), [ll.Constant(I32, 0)])
    if plan.async_dot:  # the last wgmma group is still running: wait, with the accumulators through
        phis[plan.acc_index] = wgmma.wait_pass_through(lw, phis[plan.acc_index], 0)
    lw.barrier()
    if chain is not None:
        if not plan.async_dot:
            chain.stages_at_exit(lw, plan, it)
    elif plan.tma:  # every copy issued was waited for (none past the end are)
        tma.invalidate_barriers(lw, plan.barriers, S * plan.n_tma)
    for r, l, ps in zip(op.results, lays, phis):
        lw.bind(r, l, ps)
