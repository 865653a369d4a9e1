"""Software pipelining of `for` loops with several wgmma dots whose other operands stay put —
attention's loop: `k = desc_k.load(...).T; qk = tl.dot(q, k)` … `acc = tl.dot(p, v, acc)`.

pipeline.py takes a loop with one dot whose two operands are both loaded in the body. This takes
the loops it leaves where every wgmma operand is one of:
  - a block loaded in the body (masked with `other` = 0 or unmasked, or through TMA — a tensor
    descriptor's `tma_load`, whose tile is row-major as in global memory —, directly or through a 2-D
    `trans`, used by dots alone — one tile may feed several, the backward's qT feeds `dot(k, qT)`
    and `dot(dsT, qT.T)` — its pointer and mask pure index arithmetic of the induction variable
    and iter args) — copied with cp.async, num_stages buffers ahead, as pipeline.py does;
  - a block defined before the loop — pinned in shared memory for the loop (dot.pin_loop_invariant_operands);
  - A held in a wgmma accumulator layout (wgmma.a_from_registers: attention's P) — fed from registers.
Each stage holds one tile per loaded operand; the pinned tiles sit below the stages, and the body's
other shared-memory uses (reductions, layout changes) above them (Lowering.smem_reserved), so
nothing the copies are still writing is touched. Each dot waits for its wgmma at once (the softmax
reads QKᵀ right away), except the last one when it only accumulates across iterations (P·V):
it stays in flight over the back edge and the next iteration's first dot waits for it
(_plan_async_accumulator). Iteration i: cp.async.wait_group(S-2); bar.sync; the body, its dots
reading buffer i % S; then bar.sync and the copies of iteration i+S-1 into the buffer iteration
i-1 used (before the body when no dot stays in flight).
"""
from __future__ import annotations

import math

from . import dot, pipeline, warp_specialize, wgmma
from .dot_layouts import SmemTile, contiguous_dim, is_fp8_kind, mma_kind, uses_wgmma
from .llvm_types import esize
from .memory import access_width

# shared memory left above the stages for the loop body's own uses
TRANSIENT_MARGIN = 16 * 1024


def _align(n: int) -> int:
    return (n + 1023) // 1024 * 1024


def _operand_load(top, v):
    """(load op, 2-D trans op or None) when dot operand `v` is a block loaded in the loop body,
    directly or transposed; else None."""
    lo, tr = v.owner, None
    if lo is not None and lo.name == "trans" and lo in top and tuple(lo.attrs.get("perm", ())) == (1, 0):
        tr, v = lo, lo.operands[0]
        lo = v.owner
    if lo is not None and lo.name == "tma_load" and lo in top:
        return lo, tr
    if lo is None or lo.name != "load" or lo not in top or not v.is_block or lo.attrs.get("volatile"):
        return None
    if not pipeline._zero_const(lo.operands[2]):
        return None
    return lo, tr


def _only_feeds_dots(lw, entries) -> bool:
    """Each pipelined load (and each trans of one) is used by the dots that read it from its tile
    alone: nothing else may see its registers, which are never made."""
    readers = {}
    for d, i, lo, tr in entries:
        readers.setdefault((tr or lo).result.id, set()).add(d)
        if tr is not None:
            readers.setdefault(lo.result.id, set()).add(tr)
    return all(u in users for vid, users in readers.items() for u in lw.uses.get(vid, ()))


def make_plan(lw, op):
    stages = pipeline.loop_stages(lw, op)
    if stages is None:
        return None
    body = op.regions[0]
    top = set(body.ops)
    dots = [o for o in body.walk() if o.name == "dot"]
    if not dots or any(o not in top or not (mma_kind(o) in ("f16", "bf16") or is_fp8_kind(mma_kind(o)))
                       or not uses_wgmma(o, lw.options) for o in dots):
        return None
    inside = {a.id for a in body.args} | {r.id for o in body.walk() for r in o.results}
    entries = []
    pinned_end, n_pinned = _align(lw.smem_reserved), 0
    for d in dots:
        for i in (0, 1):
            v = d.operands[i]
            if is_fp8_kind(mma_kind(d)):
                # fp8 wgmma reads K-major tiles only: TMA loads whose tile is (A [M, K] as it is,
                # B as the transpose of an [N, K] block); anything else stays with pipeline.py
                found = _operand_load(top, v) if v.id in inside else None
                if found is None or found[0].name != "tma_load" or (found[1] is not None) != (i == 1):
                    return None
                entries.append((d, i) + found)
                continue
            if v.id not in inside:   # pinned: the same arithmetic as dot.pin_loop_invariant_operands
                nbytes = math.prod(v.shape) * v.dtype.itemsize
                if pinned_end + nbytes > dot.PINNED_LIMIT:
                    return None
                pinned_end, n_pinned = _align(pinned_end + nbytes), n_pinned + 1
                continue
            if i == 0 and wgmma.a_from_registers(d, lw.want(v), lw.options):
                continue
            found = _operand_load(top, v)
            if found is None:
                return None
            entries.append((d, i) + found)
    if not entries or not _only_feeds_dots(lw, entries):
        return None
    loads = list(dict.fromkeys(e[2] for e in entries))
    addr = pipeline.address_slices(lw, body, loads)
    if addr is None:
        return None
    lays, vecs, offsets, off = [], [], [], 0
    for lo in loads:
        lay = lw.want(lo.result)
        es = esize(lo.result.dtype)
        tile = SmemTile(lo.result.shape, _write_cdim(lo, lay), es, panels=True)
        if lo.name == "tma_load":   # the copy engine writes the tile: no per-thread width
            lays.append(lay)
            vecs.append(None)
            offsets.append(off)
            off = _align(off + tile.nbytes)
            continue
        v = min(access_width(lw, lay, lo.operands[0], lo.operands[1], es), pipeline._smem_vec(lay, tile))
        if v * es not in (4, 8, 16):
            return None
        lays.append(lay)
        vecs.append(v)
        offsets.append(off)
        off = _align(off + tile.nbytes)
    barriers = 1024 if any(lo.name == "tma_load" for lo in loads) else 0   # one mbarrier per stage
    stages = min(stages, (pipeline.SMEM_LIMIT - TRANSIENT_MARGIN - pinned_end - barriers) // off)
    if stages < 2:
        return None
    p = pipeline.Plan()
    p.entries, p.loads, p.lays, p.vecs, p.offsets = entries, loads, lays, vecs, offsets
    p.skip = set(loads) | {e[3] for e in entries if e[3] is not None}
    p.stages, p.dist, p.stage_bytes, p.n_pinned, p.barrier_bytes = stages, stages - 1, off, n_pinned, barriers
    p.addr_ops, p.upd_ops, p.needed = addr
    p.dots = set(dots)
    p.single_pending = 0   # warp_specialize.py may keep a lone dot in flight across the back edge
    _plan_async_accumulator(lw, p, body, dots)
    return p


def _plan_async_accumulator(lw, p, body, dots):
    """Leave the body's last wgmma in flight across the loop's back edge (Triton's order for
    attention: P·V runs while the next iteration waits for its tiles and issues QKᵀ) when its
    result is only carried to the next iteration, whose uses of it all come after the first dot:
    that dot's wait (wait_group 0) then covers it too. Off with knobs.codegen.wgmma "sync"."""
    p.async_dot = False
    first, last = dots[0], dots[-1]
    if lw.options.wgmma != "async" or first is last or last.result.dtype.name != "fp32":
        return
    y = body.terminator
    uses = lw.uses.get(last.result.id, ())
    slots = [i for i, v in enumerate(y.operands) if v is last.result]
    if len(slots) != 1 or any(u is not y for u in uses):
        return
    arg = body.args[slots[0] + 1]
    order = {o: n for n, o in enumerate(body.ops)}
    if any(order.get(u, -1) <= order[first] for u in lw.uses.get(arg.id, ())):
        return
    p.async_dot, p.acc_index, p.carried, p.first_dot, p.last_dot = True, slots[0], arg, first, last


def _write_cdim(lo, lay) -> int:
    """The contiguous dim of a load's tile: the one its registers arrive along (cp.async), or the
    last, as in global memory (TMA)."""
    return 1 if lo.name == "tma_load" else contiguous_dim(lay)


def _tiles(lw, plan, start: int):
    """The write tiles (each load's shape) and the read tiles (each dot operand's shape: the
    transpose of a `trans`-ed load is the same memory, the other dim contiguous) of one stage whose
    first byte is `start`, with bases relative to the current start of the transient space."""
    write = []
    for lo, lay, off in zip(plan.loads, plan.lays, plan.offsets):
        write.append(SmemTile(lo.result.shape, _write_cdim(lo, lay), esize(lo.result.dtype),
                              base=start + off - lw.smem_reserved, panels=True))
    read = {}
    for d, i, lo, tr in plan.entries:
        t = write[plan.loads.index(lo)]
        shape, cd = t.shape, t.cdim
        if tr is not None:
            shape, cd = (shape[1], shape[0]), 1 - cd
        read[(id(d), i)] = SmemTile(shape, cd, t.es, base=t.base, panels=True)
    return write, read


def _emit_dot(lw, plan, d, read_tiles, read_base):
    tiles, dyn = [None, None], [None, None]
    for i in (0, 1):
        key = (id(d), i)
        if key in read_tiles:
            tiles[i], dyn[i] = read_tiles[key], read_base
        elif key in lw.pinned_tiles:
            tiles[i] = dot._rebased(lw, lw.pinned_tiles[key])
    a = d.operands[0]
    a_regs = lw.block(a, lw.layout_of(a)) if tiles[0] is None else None
    if not plan.async_dot:
        wgmma.dot_from_tiles(lw, d, tiles[0], tiles[1], dyn_base=tuple(dyn), a_regs=a_regs, pending=plan.single_pending)
    elif d is plan.first_dot:   # its wait also completes the previous iteration's last dot
        lay = lw.slot_layout(plan.carried)
        waited = wgmma.dot_from_tiles(lw, d, tiles[0], tiles[1], dyn_base=tuple(dyn), a_regs=a_regs,
                                      also_wait=lw.block(plan.carried, lay))
        lw.bind(plan.carried, lay, waited)
    else:
        wgmma.dot_from_tiles(lw, d, tiles[0], tiles[1], dyn_base=tuple(dyn), a_regs=a_regs,
                             pending=1 if d is plan.last_dot else 0)


def lower_for(lw, op) -> bool:
    """Lower a qualifying `for` (see the module doc); False (nothing emitted) otherwise."""
    plan = make_plan(lw, op)
    if plan is None:
        return False
    reserved_before = lw.smem_reserved
    pinned = dot.pin_loop_invariant_operands(lw, op)
    assert len(pinned) == plan.n_pinned, "multi_dot.make_plan and dot.pin_loop_invariant_operands disagree"
    start = _align(lw.smem_reserved)
    plan.barriers = start   # TMA: the stages' mbarriers, below the stages
    start += plan.barrier_bytes
    lw.smem_bytes = max(lw.smem_bytes, start - lw.smem_reserved + plan.stages * plan.stage_bytes)
    lw.smem_reserved = start + plan.stages * plan.stage_bytes
    plan.tiles, read_tiles = _tiles(lw, plan, start)
    loop = warp_specialize.lower_loop if warp_specialize.applies(lw, op, plan) else pipeline.pipelined_loop
    loop(lw, op, plan, lambda d, read_base: _emit_dot(lw, plan, d, read_tiles, read_base))
    dot.unpin(lw, pinned, reserved_before, barrier=False)   # the loop ended with a bar.sync
    return True
