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
The body's other loads of row or column vectors (the backward's per-row M and Delta), their
addresses index arithmetic too, are copied along with the tiles (_side_loads) and read from their
stage in whatever layout their users want (Lowering.bind_smem_block), as Triton streams them.
Each stage holds one tile per loaded operand (and the vectors); the pinned tiles sit below the stages, and the body's
other shared-memory uses (reductions, layout changes) above them (Lowering.smem_reserved), so
nothing the copies are still writing is touched. Each dot waits for its wgmma at once (the softmax
reads QKᵀ right away), except the last one when it only accumulates across iterations (P·V):
it stays in flight over the back edge and the next iteration's first dot waits for it
(_plan_async_accumulator). Iteration i: cp.async.wait_group((S-2)·L, L loads, a group each);
bar.sync; the body, its dots reading buffer i % S; then bar.sync and the copies of iteration i+S-1
into the buffer iteration i-1 used (before the body when no dot stays in flight).
"""
from __future__ import annotations

import math

from . import dot, f16_accumulator, pipeline, warp_specialize, wgmma
from .dot_layouts import PINNED_LIMIT, SmemTile, contiguous_dim, is_fp8_kind, mma_kind, uses_wgmma
from .llvm_types import esize
from .memory import access_width

# shared memory left above the stages for the loop body's own uses when the first lowering, which
# leaves none (options.smem_margin), needed more than the device has (nvptx.lower_to_llvm)
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
    fn_top = set(lw.fn.body.ops)
    kernel_pins = set(lw.kernel_pins)
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
                n_pinned += 1
                kernel_value = v.owner is None or v.owner in fn_top
                if kernel_value and v.id in kernel_pins:
                    continue   # its tile is already there, below smem_reserved
                if kernel_value and op in fn_top:
                    kernel_pins.add(v.id)
                nbytes = math.prod(v.shape) * v.dtype.itemsize
                if pinned_end + nbytes > PINNED_LIMIT:
                    return None
                pinned_end = _align(pinned_end + nbytes)
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
    side = _side_loads(lw, body, loads)
    addr = pipeline.address_slices(lw, body, loads + side) if side else None
    if addr is None:
        side = []
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
    for lo in side:   # after the operand tiles, 16-byte aligned
        lay = lw.want(lo.result)
        lays.append(lay)
        vecs.append(_side_vec(lw, lo, lay))
        offsets.append(off)
        off += -(-FlatTile(lo.result.shape, esize(lo.result.dtype)).nbytes // 16) * 16
    off = _align(off)
    loads = loads + side
    barriers = 1024 if any(lo.name == "tma_load" for lo in loads) else 0   # one mbarrier per stage
    room = pipeline.SMEM_LIMIT - pinned_end - barriers
    if (room - TRANSIENT_MARGIN) // off < min(stages, (room - lw.options.smem_margin) // off):
        lw.stages_past_margin = True   # if the body's scratch does not fit above them, lower_to_llvm retries
    stages = min(stages, (room - lw.options.smem_margin) // off)
    if stages < 2:
        return None
    p = pipeline.Plan()
    p.entries, p.loads, p.lays, p.vecs, p.offsets = entries, loads, lays, vecs, offsets
    p.skip = set(loads) | {e[3] for e in entries if e[3] is not None}
    p.side_loads = side
    p.stages, p.dist, p.stage_bytes, p.n_pinned, p.barrier_bytes = stages, stages - 1, off, n_pinned, barriers
    p.addr_ops, p.upd_ops, p.needed = addr
    p.dots = set(dots)
    p.lazy_waits = True   # _emit_dot waits for each TMA tile before the first dot reading it
    _plan_async_accumulator(lw, p, body, dots)
    _plan_deferred_waits(lw, p, body, dots)
    p.in_flight = []
    return p


class FlatTile:
    """A block in shared memory in row-major order, unswizzled: a side load's stage buffer (the
    interface of dot_layouts.SmemTile that the copies and reads use)."""

    def __init__(self, shape: tuple, es: int, base: int = 0):
        self.shape, self.es, self.base = tuple(shape), es, base
        self.vec = max(1, 16 // es)
        self.nbytes = math.prod(shape) * es
        self.strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]

    def offset(self, coord: tuple) -> int:
        return sum(c * s for c, s in zip(coord, self.strides))


def _side_vec(lw, lo, lay) -> int:
    es = esize(lo.result.dtype)
    return min(access_width(lw, lay, lo.operands[0], lo.operands[1], es), pipeline._smem_vec(lay, FlatTile(lo.result.shape, es)))


def _side_loads(lw, body, operand_loads) -> list:
    """The body's other loads of row or column vectors (the backward's per-row M and Delta): copied
    with the operand tiles, each stage holding them row-major, and read from there in whatever
    layout their users want — no load in the loop waiting on global memory, and no conversion
    through shared memory with its two barriers. Their addresses must be index arithmetic too
    (make_plan drops them otherwise)."""
    out = []
    for lo in body.ops:
        if (lo.name != "load" or lo in operand_loads or not lo.result.is_block or lo.result.dtype.is_ptr()
                or lo.result.dtype.name == "int1"):
            continue
        if len(lo.result.shape) != 1 or lo.attrs.get("volatile") or not pipeline._zero_const(lo.operands[2]):
            continue
        if not (lo.operands[0].is_block and lo.operands[0].dtype.is_ptr()):
            continue
        lay = lw.want(lo.result)
        if _side_vec(lw, lo, lay) * esize(lo.result.dtype) in (4, 8, 16):
            out.append(lo)
    return out


def _plan_async_accumulator(lw, p, body, dots):
    """Leave the body's last wgmma in flight across the loop's back edge (Triton's order for
    attention: P·V runs while the next iteration waits for its tiles and issues QKᵀ) when its
    result is only carried to the next iteration, whose uses of it all come after the first dot:
    that dot's wait (wait_group 0) then covers it too. Off with knobs.codegen.wgmma "sync"."""
    p.async_dot = p.single_dot = False
    first, last = dots[0], dots[-1]
    if first is last and all(lo.name == "tma_load" for lo in p.loads):
        _plan_async_single_dot(lw, p, body, first)
        return
    if lw.options.wgmma != "async" or first is last or not _float_accumulator(last):
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


def _plan_async_single_dot(lw, p, body, d):
    """One dot fed by TMA (tutorial 09's loop with `b.T`): kept in flight across iterations as
    pipeline.py keeps its single dot (wait_group 1; the accumulator its own iter arg, yielded and
    used by nothing else). Loops of cp.async loads that land here keep the measured code (each
    wgmma waited for)."""
    if lw.options.wgmma != "async" or not _float_accumulator(d):
        return
    c, y = d.operands[2], body.terminator
    if c.owner is not None or c not in body.args[1:]:
        return
    i = body.args.index(c) - 1
    if y.operands[i] is d.result and all(u is y for u in lw.uses.get(d.result.id, ())):
        p.async_dot, p.single_dot, p.acc_index = True, True, i


def _float_accumulator(d) -> bool:
    """The dot's result is its wgmma's floating-point accumulator (fp32, or fp16 accumulated in fp16)."""
    return d.result.dtype.name != "int32" and f16_accumulator.result_is_accumulator(d)


def _write_cdim(lo, lay) -> int:
    """The contiguous dim of a load's tile: the one its registers arrive along (cp.async), or the
    last, as in global memory (TMA)."""
    return 1 if lo.name == "tma_load" else contiguous_dim(lay)


def _plan_deferred_waits(lw, p, body, dots):
    """The dots between the first and the last whose result is only carried to the next iteration
    (the backward's dV += PᵀdO): committed without a wait, their accumulators routed through the
    next dot's wait instead (Triton's order), so that the next dot issues while they run."""
    p.deferred = set()
    if lw.options.wgmma != "async":
        return
    y = body.terminator
    for d in dots[1:-1]:
        if d.result.dtype.name == "fp32" and all(u is y for u in lw.uses.get(d.result.id, ())):
            p.deferred.add(d)


def _tiles(lw, plan, start: int):
    """The write tiles (each load's shape) and the read tiles (each dot operand's shape: the
    transpose of a `trans`-ed load is the same memory, the other dim contiguous) of one stage whose
    first byte is `start`, with bases relative to the current start of the transient space."""
    write = []
    for lo, lay, off in zip(plan.loads, plan.lays, plan.offsets):
        base = start + off - lw.smem_reserved
        if lo in plan.side_loads:
            write.append(FlatTile(lo.result.shape, esize(lo.result.dtype), base=base))
        else:
            write.append(SmemTile(lo.result.shape, _write_cdim(lo, lay), esize(lo.result.dtype), base=base, panels=True))
    plan.side = {lo: t for lo, t in zip(plan.loads, write) if lo in plan.side_loads}
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
    kw = dict(dyn_base=tuple(dyn), a_regs=a_regs)
    for e in plan.entries:   # the TMA tiles this dot reads, waited for here (pipeline.wait_tile)
        if e[0] is d and e[2].name == "tma_load":
            pipeline.wait_tile(lw, plan, [lo for lo in plan.loads if lo.name == "tma_load"].index(e[2]))
    if plan.single_dot:   # its accumulator chains into the next iteration's; the exit waits
        wgmma.dot_from_tiles(lw, d, tiles[0], tiles[1], pending=1, **kw)
        return
    if d in plan.deferred:
        wgmma.dot_from_tiles(lw, d, tiles[0], tiles[1], pending=None, **kw)
        plan.in_flight.append(d.result)
        return
    # this dot's wait also completes the dots still in flight: the previous iteration's last one
    # (at the first dot) and the deferred ones before it
    running = list(plan.in_flight)
    if plan.async_dot and d is plan.first_dot:
        running.insert(0, plan.carried)
    plan.in_flight = []
    if plan.async_dot and d is plan.last_dot and not running:
        # every earlier group of the iteration is complete (the dot before waited for 0): nothing
        # to wait for until the next iteration's first dot, as Triton's loop
        wgmma.dot_from_tiles(lw, d, tiles[0], tiles[1], pending=None, **kw)
        return
    lays = [lw.layout_of(v) for v in running]
    regs = [lw.block(v, lay) for v, lay in zip(running, lays)]
    waited = wgmma.dot_from_tiles(lw, d, tiles[0], tiles[1], also_wait=[x for r in regs for x in r],
                                  pending=1 if plan.async_dot and d is plan.last_dot else 0, **kw)
    for v, lay, r in zip(running, lays, regs):
        lw.set_block(v, lay, waited[:len(r)])
        waited = waited[len(r):]
    if d is getattr(plan, "first_dot", None) and getattr(plan, "after_first_wait", None) is not None:
        plan.after_first_wait()   # the previous iteration's buffer is free: its next copies (pipelined_loop)


def lower_for(lw, op) -> bool:
    """Lower a qualifying `for` (see the module doc); False (nothing emitted) otherwise."""
    plan = make_plan(lw, op)
    if plan is None:
        return False
    reserved_before = lw.smem_reserved
    loop = warp_specialize.lower_loop if warp_specialize.applies(lw, op, plan) else pipeline.pipelined_loop
    pinned = dot.pin_loop_invariant_operands(lw, op, defer_tma_waits=loop is pipeline.pipelined_loop)
    assert len(pinned) == plan.n_pinned, "multi_dot.make_plan and dot.pin_loop_invariant_operands disagree"
    emit_dot = place_stages(lw, plan)
    loop(lw, op, plan, emit_dot)
    dot.unpin(lw, pinned, reserved_before, barrier=False)   # the loop ended with a bar.sync
    return True


def stages_end(lw, plan) -> int:
    """The absolute end of the plan's barriers and stages placed from the current lw.smem_reserved."""
    return _align(lw.smem_reserved) + plan.barrier_bytes + plan.stages * plan.stage_bytes


def place_stages(lw, plan):
    """Put the plan's barriers and stages at lw.smem_reserved (raised past them: the body's other
    uses go above) and return its `emit_dot(dot op, read base)` for pipeline.pipelined_loop."""
    start = _align(lw.smem_reserved)
    plan.barriers = start   # TMA: the stages' mbarriers, below the stages
    start += plan.barrier_bytes
    lw.smem_bytes = max(lw.smem_bytes, start - lw.smem_reserved + plan.stages * plan.stage_bytes)
    lw.smem_reserved = start + plan.stages * plan.stage_bytes
    plan.tiles, read_tiles = _tiles(lw, plan, start)
    return lambda d, read_base: _emit_dot(lw, plan, d, read_tiles, read_base)
