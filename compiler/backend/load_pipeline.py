"""Software pipelining of the loads of a loop without a dot, where the loop asks for it:
`for ... in tl.range(..., num_stages=S)` (Triton's pipeliner does the same for a loop that carries
tt.num_stages, and only then: its other loops pipeline only the loads that feed a dot).

A load qualifies as Triton's does: a block load in the loop's body (not under an `if`), its
address (pointer and mask) index arithmetic of the induction variable and of iter args advanced by
index arithmetic (so no load feeds another's address), masked-off elements zero (`other` 0 or
none), and at least 4 bytes a thread can copy at once (cp.async moves 4, 8 or 16). Each such load
gets S-1 buffers in shared memory, row-major (multi_dot.FlatTile) — Triton's count, so a kernel
needs the shared memory Triton's does, and too many stages fail at launch with OutOfResources as
there (no stages are dropped to fit, unlike the dot loops, which pick the deepest pipeline that fits).

pipeline.pipelined_loop runs it with distance S-1 over the S-1 buffers: iteration i waits for its
own copies, reads them into registers (the layout the load's users want), and after a bar.sync
(every thread is done with the buffer) copies iteration i+S-1's into that same buffer, then runs
the body. As in Triton, the loads of the next S-1 iterations are issued before this iteration's
stores: a loop that stores to what a later iteration loads reads the old values (interpret mode
runs the loop as written).
"""
from __future__ import annotations

from llvmlite import ir as ll

from . import pipeline
from .llvm_types import I32, esize, mty
from .memory import access_width
from .multi_dot import FlatTile

_ALIGN = 16   # each tile 16-byte aligned: cp.async's widest copy


def _candidates(lw, body) -> list:
    out = []
    for lo in body.ops:
        if lo.name != "load" or not lo.result.is_block or lo.attrs.get("volatile"):
            continue
        if lo.result.dtype.is_ptr() or lo.result.dtype.name == "int1" or not pipeline._zero_const(lo.operands[2]):
            continue
        if not (lo.operands[0].is_block and lo.operands[0].dtype.is_ptr()):
            continue
        if pipeline.address_slices(lw, body, [lo]) is None:
            continue
        lay = lw.want(lo.result)
        es = esize(lo.result.dtype)
        v = min(access_width(lw, lay, lo.operands[0], lo.operands[1], es), pipeline._smem_vec(lay, FlatTile(lo.result.shape, es)))
        if v * es in (4, 8, 16):
            out.append((lo, lay, v))
    return out


def make_plan(lw, op):
    if op.attrs.get("num_stages") is None:
        return None
    stages = pipeline.loop_stages(lw, op)
    if stages is None:
        return None
    body = op.regions[0]
    if any(o.name in ("dot", "dot_scaled") for o in body.walk()):
        return None   # dot loops: pipeline.py / multi_dot.py, or not pipelined
    found = _candidates(lw, body)
    if not found:
        return None
    loads = [lo for lo, _, _ in found]
    addr = pipeline.address_slices(lw, body, loads)
    if addr is None:
        return None
    p = pipeline.Plan()
    p.loads, p.lays, p.vecs = loads, [lay for _, lay, _ in found], [v for _, _, v in found]
    base, tiles = 0, []
    for lo in loads:
        tile = FlatTile(lo.result.shape, esize(lo.result.dtype), base)
        tiles.append(tile)
        base += (tile.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    p.tiles, p.stage_bytes = tuple(tiles), base
    p.stages = p.dist = stages - 1          # S-1 buffers, S-1 iterations ahead (Triton's)
    p.read_first = _read_stage              # the copies ahead reuse the buffer it reads
    p.async_dot = False
    p.addr_ops, p.upd_ops, p.needed = addr
    p.skip, p.dots, p.side = set(loads), set(), {}
    return p


def _read_stage(lw, plan, read_base) -> None:
    """This iteration's loads, from the stage at byte offset `read_base`, into registers."""
    for lo, lay, tile in zip(plan.loads, plan.lays, plan.tiles):
        dyn = lw.b.add(read_base, ll.Constant(I32, tile.base)) if tile.base else read_base
        lw.set_block(lo.result, lay, lw.smem_read(lay, mty(lo.result.dtype), tile.es, dyn_bytes=dyn))


def lower_for(lw, op) -> bool:
    """Lower a `for` whose loads qualify with a cp.async pipeline; False (nothing emitted) otherwise."""
    plan = make_plan(lw, op)
    if plan is None:
        return False
    # the stages sit at lw.smem_reserved, raised past them while the loop runs, so that the body's
    # own shared memory (reductions, layout changes) goes above them; the tiles' bases are relative
    # to the raised mark, as the copies and reads address from there
    reserved_before = lw.smem_reserved
    start = (reserved_before + _ALIGN - 1) // _ALIGN * _ALIGN
    end = start + plan.stages * plan.stage_bytes
    lw.smem_bytes = max(lw.smem_bytes, end - reserved_before)
    lw.smem_reserved = end
    for tile in plan.tiles:
        tile.base += start - end
    try:
        pipeline.pipelined_loop(lw, op, plan, emit_dot=None)
    finally:
        lw.smem_reserved = reserved_before   # the loop ends with every copy landed and a bar.sync
    return True
