"""A tensor-descriptor block that only the wgmma dots of the kernel's loops read (attention's Q):
its copy lands straight in the shared-memory tile those loops pin (dot.pin_loop_invariant_operands
finds it among the kernel's pins), and it is waited for only once the first of those loops has
issued its own prologue copies (pipeline.pipelined_loop calls wait_pending), so that Q's latency
and the first K/V tiles' overlap. tma.lower_tma_load followed by the pin waited for Q at once,
read it into registers and wrote the same bytes back into the same place (8 ld/st.shared.v4 a
thread and three bar.sync for Q at BLOCK_M 128, HEAD_DIM 64) before the K/V copies started.

The block's mbarrier sits beside its tile in the kernel-level reserved space, which nothing reuses,
so it is not invalidated. Taken only when the load is at the kernel's top level, 2-D, in a kernel
that is not warp-specialized; every use is a 16-bit wgmma dot in a loop of the top level whose A,
if it is the block, is read from shared memory; nothing between the load and the first of those
loops has a region or returns (the wait is emitted at that loop: every path reaches it, and no
program ends with the copy in flight); the tile fits under dot.PINNED_LIMIT.
"""
from __future__ import annotations

from llvmlite import ir as ll

from . import tma, wgmma
from .dot_layouts import mma_kind, uses_wgmma
from .llvm_types import I32


def _align(n: int) -> int:
    return (n + 1023) // 1024 * 1024


def _loop_dots(fn) -> dict:
    """id of each dot inside a `for` of the kernel's top level → that loop."""
    out = {}
    for top in fn.body.ops:
        if top.name == "for":
            for o in top.regions[0].walk():
                if o.name == "dot":
                    out[id(o)] = top
    return out


def applies(lw, op) -> bool:
    from .dot import PINNED_LIMIT  # noqa: PLC0415 - dot imports the rules that import this
    res = op.result
    ops = lw.fn.body.ops
    if lw.ws is not None or op not in ops or len(res.shape) != 2 or not lw.options.wgmma_target:
        return False
    if _align(lw.smem_reserved) + tma.tile_for(res).nbytes + 1024 > PINNED_LIMIT:
        return False
    loops = _loop_dots(lw.fn)
    uses = lw.uses.get(res.id, ())
    first = None
    for u in uses:
        if u.name != "dot" or id(u) not in loops or mma_kind(u) not in ("f16", "bf16") or not uses_wgmma(u, lw.options):
            return False
        if u.operands[2] is res or (u.operands[0] is res and wgmma.a_from_registers(u, lw.want(res), lw.options)):
            return False
        at = ops.index(loops[id(u)])
        first = at if first is None else min(first, at)
    if first is None:
        return False
    return all(not o.regions and o.name != "return" for o in ops[ops.index(op) + 1:first])


def lower(lw, op) -> None:
    """One lane of warp 0 arms the block's mbarrier and starts its copy into a new kernel-level
    pinned tile (predicated, as the loops' copies: pipeline._issue); nobody waits here (wait_pending)."""
    res = op.result
    start = _align(lw.smem_reserved)
    tile = tma.tile_for(res, start)
    bar = start + tile.nbytes
    end = _align(bar + tma.MBARRIER_BYTES)
    lw.smem_bytes = max(lw.smem_bytes, end - lw.smem_reserved)
    tma.init_barriers(lw, bar, 1)
    offsets = [lw.scalar(o) for o in op.operands[1:]]
    tma.issue_copies(lw, [(lw.scalar(op.operands[0]), offsets, tile, tma.smem_address(lw, start))],
                     tma.smem_address(lw, bar), pred=tma.elected_by_warp0(lw))
    lw.kernel_pins[res.id] = tile
    lw.smem_reserved = lw.kernel_pins_end = end
    lw.pending_tma_waits.append(bar)


def wait_pending(lw) -> None:
    """Every thread waits for the pinned blocks whose copies are still in flight (phase 0)."""
    for bar in lw.pending_tma_waits:
        tma.wait(lw, tma.smem_address(lw, bar), ll.Constant(I32, 0))
    lw.pending_tma_waits = []
