"""Rules for structured control flow (`for`, `if`, `while`, `return`) and barriers.

Loop-carried and merged values share one layout per slot (the layout assignment links them); the
lowering's slot and loop helpers (lowering.py) build the phis. A `for` loop feeding a tensor-core
dot is software-pipelined (pipeline.py, multi_dot.py) when it qualifies, and a loop of tiles
around a TMA-fed one overlaps the next tile's copies with the epilogue (persistent.py).
"""
from __future__ import annotations

from . import device_calls, dot, load_pipeline, loop_metadata, multi_dot, persistent, pipeline
from .llvm_types import is_signed


def lower_for(lw, op):
    # K loops feeding a tensor-core dot: cp.async, num_stages buffers; then loops of several dots
    # (attention) or of one dot with a transposed or shared operand; a loop over tiles around a
    # TMA-fed one, the next tile's copies issued before this tile's epilogue (persistent kernels);
    # a loop without a dot that gives num_stages (tl.range): its loads, as Triton
    if (pipeline.lower_for(lw, op) or multi_dot.lower_for(lw, op) or persistent.lower_for(lw, op)
            or load_pipeline.lower_for(lw, op)):
        return
    reserved_before = lw.smem_reserved
    pinned = dot.pin_loop_invariant_operands(lw, op)
    lb, ub, step = (lw.scalar(o) for o in op.operands[:3])
    inits = op.operands[3:]
    body = op.regions[0]
    b = lw.b
    lays = [lw.slot_layout(a) for a in body.args[1:]]
    init_regs = [lw.get_as(v, l) for v, l in zip(inits, lays)]
    lw.open_hoist(body)
    header, exitb, iv, phis = lw.loop_head("for", lb, ub, step, init_regs, is_signed(op.operands[0].dtype))
    lw.vals[body.args[0].id] = iv
    for a, l, ps in zip(body.args[1:], lays, phis):
        lw.bind(a, l, ps)
    nxt = lw.region_yields(body, lays)
    loop_metadata.annotate(lw, lw.loop_back(header, iv, step, phis, nxt), op)
    lw.close_hoist()
    b.position_at_end(exitb)
    if pinned:
        dot.unpin(lw, pinned, reserved_before)
    for r, l, ps in zip(op.results, lays, phis):
        lw.bind(r, l, ps)


def lower_if(lw, op):
    cond = lw.scalar(op.operands[0])
    b = lw.b
    lays = [lw.slot_layout(r) for r in op.results]
    thenb = lw.func.append_basic_block("if.then")
    elseb = lw.func.append_basic_block("if.else")
    merge = lw.func.append_basic_block("if.end")
    b.cbranch(cond, thenb, elseb)
    incoming = []
    for region, bb in zip(list(op.regions) + [None] * (2 - len(op.regions)), (thenb, elseb)):
        b.position_at_end(bb)
        vals = []
        if region is not None:
            vals = lw.region_yields(region, lays)
        incoming.append((b.block, vals))
        b.branch(merge)
    b.position_at_end(merge)
    for i, (r, l) in enumerate(zip(op.results, lays)):
        regs = []
        n = len(incoming[0][1][i])
        for j in range(n):
            p = b.phi(incoming[0][1][i][j].type)
            for blk, vals in incoming:
                p.add_incoming(vals[i][j], blk)
            regs.append(p)
        lw.bind(r, l, regs)


def lower_while(lw, op):
    before, after = op.regions
    b = lw.b
    lays = [lw.slot_layout(a) for a in before.args]
    init_regs = [lw.get_as(v, l) for v, l in zip(op.operands, lays)]
    pre = b.block
    header = lw.func.append_basic_block("while.before")
    bodyb = lw.func.append_basic_block("while.after")
    exitb = lw.func.append_basic_block("while.exit")
    b.branch(header)
    b.position_at_end(header)
    phis = []
    for regs in init_regs:
        ps = []
        for x in regs:
            p = b.phi(x.type)
            p.add_incoming(x, pre)
            ps.append(p)
        phis.append(ps)
    for a, l, ps in zip(before.args, lays, phis):
        lw.bind(a, l, ps)
    # the before-region's values dominate the after-region and the exit: keep its scope open
    lw.scopes.append({})
    term = lw.lower_block(before)
    c = lw.scalar(term.operands[0])
    fwd = term.operands[1:]
    flays = [lw.slot_layout(a) for a in after.args]
    fregs = [lw.get_as(v, l) for v, l in zip(fwd, flays)]
    b.cbranch(c, bodyb, exitb)
    b.position_at_end(bodyb)
    for a, l, regs in zip(after.args, flays, fregs):
        lw.bind(a, l, regs)
    nxt = lw.region_yields(after, lays)
    end = b.block
    for ps, regs in zip(phis, nxt):
        for p, x in zip(ps, regs):
            p.add_incoming(x, end)
    loop_metadata.annotate(lw, b.branch(header), op)
    lw.scopes.pop()
    b.position_at_end(exitb)
    for r, l, regs in zip(op.results, flays, fregs):
        lw.bind(r, l, regs)


def lower_return(lw, op):
    if op.operands:   # a device function's values (device_calls.py)
        device_calls.lower_return(lw, op)
    else:
        lw.b.ret_void()
    lw.b.position_at_end(lw.func.append_basic_block("after_return"))


def lower_barrier(lw, op):
    lw.barrier()
