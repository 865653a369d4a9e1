"""Warp specialization of TMA-fed wgmma loops: Triton's `tl.range(..., warp_specialize=True)` on
Hopper (also every such loop with knobs.codegen.warp_specialize, BLOCKTUNE_WARP_SPECIALIZE=1).

A loop qualifies when multi_dot.py plans it with every pipelined load a `tma_load` (tma.py) whose
offsets are scalar index arithmetic of the induction variable, iter args and values from before
the loop. Its kernel then runs num_warps + 4 warps (compile_ir's "launch_warps"; the user's
num_warps stays the consumers'):

  consumers  warps 0 … num_warps-1: the whole kernel as without specialization, every bar.sync
             counted over their threads alone (`bar.sync 0, 32·num_warps`: Lowering.barrier);
  producer   one warpgroup, warps num_warps … num_warps+3. A warpgroup, not one warp, because
             `setmaxnreg` resizes whole warpgroups: it gives its registers to the consumers
             (setmaxnreg.dec to PRODUCER_REGS; the consumers .inc to what is left), under the
             register cap `.maxntid T, .minnctapersm 1` sets at entry — each role one branch of the
             if/else at the kernel's entry. Its first warp runs the loop of copies (lane 0
             issues them, the warp stays converged); the other three wait at the join.

The producer runs Triton's "switch loop": wait on named barrier 1 (all threads) for a command in
the first bytes of dynamic shared memory (HANDOFF_BYTES, reserved for the kernel) — 0: return;
k: run the producer side of WS loop k with the scalars the consumers stored next to the command —
then meet the consumers at barrier 1 again when done.
Consumers, at WS loop k (barriers: S "full" with one arrival each, S "empty" with one per consumer
warp, all initialized for this run of the loop):
  store k and the scalars; bar.sync 1 (fork)
  iteration i: wait full[i % S] (parity (i / S) & 1); the body, its dots reading stage i % S;
               lane 0 of each warp arrives on empty[(i - lag) % S] (i ≥ lag), lag = 1 when the
               last wgmma stays in flight across the back edge (wait_group 1; attention's P·V, or a
               matmul's only dot), else 0: the wgmma reading that stage has completed
  exit: wgmma.wait_group 0; bar.sync 1 (join); thread 0 invalidates the barriers; bar.sync 0
Producer, iteration j (its first warp): j ≥ S: wait empty[j % S] (parity (j / S - 1) & 1); lane 0
arms full[j % S] with expect_tx and starts the copies. Every consumer `ret` first stores command 0
and forks, so the producer ends with them; a loop of zero iterations forks and joins at once.
"""
from __future__ import annotations

from llvmlite import ir as ll

from . import pipeline, tma, wgmma
from .llvm_types import I32, I64, is_signed

PRODUCER_WARPS = 4
PRODUCER_REGS = 40       # the producer computes a few offsets: ptxas fits it in 40 without spills
REGISTER_FILE = 65536    # 32-bit registers of one SM, all for this one CTA (minnctapersm 1)
HANDOFF = 1              # named barrier of the fork and join (0 is the consumers' bar.sync)
MAX_WORDS = 32           # scalars one WS loop may hand to the producer
# the hand-off words: the first bytes of dynamic shared memory, held for the whole kernel (a static
# __shared__ array would move the dynamic memory's start off the 1024-byte alignment TMA's
# 128-byte swizzle needs)
HANDOFF_BYTES = 1024
VOID = ll.VoidType()
_MISSING = object()


# -- which kernels ------------------------------------------------------------------------------

def _tma_fed(loop) -> bool:
    """A dot in the loop's body reads a tile the body loads through TMA (directly or transposed)."""
    body = loop.regions[0]
    top = set(body.ops)
    for d in body.ops:
        if d.name != "dot":
            continue
        for v in d.operands[:2]:
            o = v.owner
            if o is not None and o.name == "trans" and o in top:
                o = o.operands[0].owner
            if o is not None and o.name == "tma_load" and o in top:
                return True
    return False


def loops_to_specialize(fn, options) -> set:
    """The TMA-fed loops marked warp_specialize, themselves or through a loop around them
    (tutorial 09 marks its persistent loop over tiles): decided before lowering, since the kernel's
    barriers then count only the consumers. One that fails multi_dot's plan runs unspecialized."""
    if not (options.pipeline and options.wgmma_target) or options.num_warps % 4:
        return set()
    if options.maxnreg is not None:   # the launch caps the registers itself: no setmaxnreg under it
        return set()
    if options.num_warps + PRODUCER_WARPS > 32:   # a CTA has at most 1024 threads
        return set()
    marked = set()
    for op in fn.walk():
        if op.name == "for" and (options.warp_specialize or op.attrs.get("warp_specialize")):
            marked.add(op)
            marked.update(o for o in op.regions[0].walk() if o.name == "for")
    return {op for op in marked if _tma_fed(op)}


class State:
    """One specialized kernel's producer side: the hand-off words, its dispatch block and switch."""

    def __init__(self, lw, loops: set):
        self.marked = loops
        self.consumer_threads = 32 * lw.num_warps
        self.all_threads = 32 * (lw.num_warps + PRODUCER_WARPS)
        self.loops = 0
        self.words = lw.smem
        fn = lw.func
        self.dispatch = fn.append_basic_block("ws.dispatch")
        self.exit = fn.append_basic_block("ws.exit")
        b = ll.IRBuilder(self.dispatch)
        handoff_barrier(b, self.all_threads)
        cmd = b.trunc(b.load(self._word(b, 0), typ=I64), I32)
        self.switch = b.switch(cmd, self.exit)
        ll.IRBuilder(self.exit).ret_void()

    def _word(self, b, i: int):
        return b.gep(self.words, [ll.Constant(I32, i)], inbounds=True, source_etype=I64)

    def registers(self) -> tuple[int, int] | None:
        """(producer, consumer) setmaxnreg counts: the consumers get what the producer's PRODUCER_REGS
        leave of the register file; None when that is no more than the cap at entry already gives."""
        entry_cap = min(255, REGISTER_FILE // self.all_threads // 8 * 8)
        consumer = min(256, (REGISTER_FILE - 32 * PRODUCER_WARPS * PRODUCER_REGS) // self.consumer_threads // 8 * 8)
        return (PRODUCER_REGS, consumer) if consumer > entry_cap else None


def prepare(lw) -> None:
    """Before lowering: set up the producer side when the kernel has a loop to specialize."""
    loops = loops_to_specialize(lw.fn, lw.options)
    if loops:
        lw.ws = State(lw, loops)
        lw.smem_reserved = lw.kernel_pins_end = HANDOFF_BYTES
        lw.smem_bytes = 0
        lw.needs_sm90a = True   # setmaxnreg


def handoff_barrier(b, threads: int) -> None:
    """barrier.sync HANDOFF over every thread of both roles (not .aligned: each role reaches it from
    its own code, the producer's first warp later than its other three)."""
    fn = b.module.globals.get("llvm.nvvm.barrier.cta.sync.count")
    if fn is None:
        fn = ll.Function(b.module, ll.FunctionType(VOID, [I32, I32]), "llvm.nvvm.barrier.cta.sync.count")
    b.call(fn, [ll.Constant(I32, HANDOFF), ll.Constant(I32, threads)])


# -- the loop -----------------------------------------------------------------------------------

def _externals(op, plan) -> list:
    """The values from before the loop that the producer needs: bounds, the needed iter args'
    initial values, the descriptors, the offsets' and updates' inputs."""
    body = op.regions[0]
    inside = {a.id for a in body.args} | {r.id for o in body.walk() for r in o.results}
    vals = list(op.operands[:3]) + [op.operands[3 + i] for i in plan.needed]
    for lo in plan.loads:
        vals.extend(lo.operands)
    for o in list(plan.addr_ops) + list(plan.upd_ops):
        vals.extend(o.operands)
    out = {}
    for v in vals:
        if v is not None and v.id not in inside:
            out.setdefault(v.id, v)
    return list(out.values())


def applies(lw, op, plan) -> bool:
    """Specialize this planned loop? (A marked loop of a specialized kernel, fed by TMA alone.)"""
    if lw.ws is None or op not in lw.ws.marked:
        return False
    if any(lo.name != "tma_load" for lo in plan.loads):
        return False
    body = op.regions[0]
    if any(body.args[i + 1].is_block for i in plan.needed):
        return False
    ext = _externals(op, plan)
    if len(ext) > MAX_WORDS or any(isinstance(lw.vals.get(v.id), tuple) for v in ext):
        return False
    plan.ws_externals = ext
    return True


def _barrier_at(lw, plan, index):
    """The i32 shared address of mbarrier `index` (int or i32) of the loop: full 0…S-1, empty S…2S-1."""
    if isinstance(index, int):
        return tma.smem_address(lw, plan.barriers + index * tma.MBARRIER_BYTES)
    off = lw.b.mul(index, ll.Constant(I32, tma.MBARRIER_BYTES))
    return tma.smem_address(lw, lw.b.add(ll.Constant(I32, plan.barriers), off))


def _to_word(b, x):
    t = x.type
    if isinstance(t, ll.PointerType):
        return b.ptrtoint(x, I64)
    if isinstance(t, ll.IntType):
        return b.zext(x, I64) if t.width < 64 else x
    bits = ll.IntType(64 if isinstance(t, ll.DoubleType) else 16 if isinstance(t, ll.HalfType) else 32)
    return _to_word(b, b.bitcast(x, bits))


def _from_word(b, w, t):
    if isinstance(t, ll.PointerType):
        return b.inttoptr(w, t)
    if isinstance(t, ll.IntType):
        return b.trunc(w, t) if t.width < 64 else w
    bits = ll.IntType(64 if isinstance(t, ll.DoubleType) else 16 if isinstance(t, ll.HalfType) else 32)
    return b.bitcast(_from_word(b, w, bits), t)


def _everywhere(lw, x) -> bool:
    """x is usable on the producer's side as it is: a constant, a parameter, or made at entry."""
    return isinstance(x, (ll.Constant, ll.Argument)) or (isinstance(x, ll.Instruction) and x.parent is lw.pb.block)


def lower_loop(lw, op, plan, emit_dot) -> None:
    """The specialized loop (see the module doc); `emit_dot(dot op, stage byte offset)` as for
    pipeline.pipelined_loop."""
    ws = lw.ws
    ws.loops += 1
    number = ws.loops
    S = plan.stages
    b = lw.b
    body = op.regions[0]
    lays = [lw.slot_layout(a) for a in body.args[1:]]
    inits = op.operands[3:]
    init_regs = [lw.get_as(v, l) for v, l in zip(inits, lays)]
    held = plan.async_dot   # the last wgmma stays in flight across the back edge (multi_dot.py)
    if held:
        init_regs[plan.acc_index] = wgmma.held_in_registers(lw, init_regs[plan.acc_index])
    signed = is_signed(op.operands[0].dtype)

    # barriers for this run of the loop, then the fork with the producer's scalars
    lw.barrier()   # their memory may still be in use
    with b.if_then(tma.elected(lw)):
        for s in range(S):
            tma._asm(lw, "mbarrier.init.shared::cta.b64 [$0], 1;", "r", [_barrier_at(lw, plan, s)])
            tma._asm(lw, f"mbarrier.init.shared::cta.b64 [$0], {lw.num_warps};", "r", [_barrier_at(lw, plan, S + s)])
        tma._asm(lw, "fence.mbarrier_init.release.cluster;", "", [])
    sent = [v for v in plan.ws_externals if not _everywhere(lw, lw.scalar(v))]
    b.store(ll.Constant(I64, number), ws._word(b, 0))
    for k, v in enumerate(sent):
        b.store(_to_word(b, lw.scalar(v)), ws._word(b, k + 1))
    handoff_barrier(b, ws.all_threads)
    _emit_producer(lw, op, plan, number, sent)

    lb, ub, step = (lw.scalar(o) for o in op.operands[:3])
    header, exitb, iv, all_phis = lw.loop_head("wsfor", lb, ub, step, [[ll.Constant(I32, 0)]] + init_regs, signed)
    it = all_phis[0][0]
    phis = all_phis[1:]
    lw.vals[body.args[0].id] = iv
    for a, l, ps in zip(body.args[1:], lays, phis):
        lw.bind(a, l, ps)
    sconst = ll.Constant(I32, S)
    slot = b.urem(it, sconst)
    tma.wait(lw, _barrier_at(lw, plan, slot), b.and_(b.udiv(it, sconst), ll.Constant(I32, 1)))
    nxt = pipeline.lower_body(lw, plan, body, lays, emit_dot, b.mul(slot, ll.Constant(I32, plan.stage_bytes)))
    # release the stage whose wgmmas have completed: this iteration's, or the one before
    lag = 1 if held else 0
    first_lane = b.icmp_unsigned("==", lw.lane, ll.Constant(I32, 0))
    if lag:
        first_lane = b.and_(first_lane, b.icmp_unsigned(">=", it, ll.Constant(I32, lag)))
        slot = b.urem(b.sub(it, ll.Constant(I32, lag)), sconst)
    tma._asm(lw, "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $1, 0;\n\t@p mbarrier.arrive.shared::cta.b64 _, [$0];\n\t}",
             "r,r", [_barrier_at(lw, plan, b.add(slot, sconst)), b.zext(first_lane, I32)])
    lw.loop_back(header, iv, step, all_phis, [[b.add(it, ll.Constant(I32, 1))]] + nxt)

    b.position_at_end(exitb)
    if held:
        phis[plan.acc_index] = wgmma.wait_pass_through(lw, phis[plan.acc_index], 0)
    handoff_barrier(b, ws.all_threads)   # the join: every copy the producer issued was waited for
    tma.invalidate_barriers(lw, plan.barriers, 2 * S)
    for r, l, ps in zip(op.results, lays, phis):
        lw.bind(r, l, ps)


def _emit_producer(lw, op, plan, number: int, sent: list) -> None:
    """The producer's case `number` of the dispatch switch: its loop of copies, then the join."""
    ws = lw.ws
    b = lw.b
    resume = b.block
    case = lw.func.append_basic_block(f"ws.produce{number}")
    ws.switch.add_case(ll.Constant(I32, number), case)
    b.position_at_end(case)
    saved = {}
    for k, v in enumerate(sent):
        saved[v.id] = lw.vals.get(v.id, _MISSING)
        word = b.load(ws._word(b, k + 1), typ=I64)
        lw.vals[v.id] = _from_word(b, word, lw.scalar(v).type)
    try:
        # the producer's first warp runs the loop (converged: every lane waits, lane 0 issues)
        with b.if_then(b.icmp_unsigned("==", lw.warp, ll.Constant(I32, lw.num_warps))):
            _produce(lw, op, plan)
    finally:
        for vid, val in saved.items():
            if val is _MISSING:
                lw.vals.pop(vid, None)
            else:
                lw.vals[vid] = val
    handoff_barrier(b, ws.all_threads)
    b.branch(ws.dispatch)
    b.position_at_end(resume)


def _produce(lw, op, plan) -> None:
    """The producer warp's loop: per iteration, wait until its stage is free, then lane 0 fills it."""
    b = lw.b
    S = plan.stages
    body = op.regions[0]
    lays = [lw.slot_layout(a) for a in body.args[1:]]
    for lo in plan.loads:   # a map written in the kernel (tma.lower_make_tensor_map): acquire it here too
        desc = lo.operands[0]
        if desc.owner is not None and desc.owner.name == "make_tensor_map":
            tma._asm(lw, f"fence.proxy.tensormap::generic.acquire.gpu [$0], {tma.MAP_BYTES};", "l",
                     [tma.map_address(lw, lw.scalar(desc))])
    lb, ub, step = (lw.scalar(o) for o in op.operands[:3])
    inits = [lw.scalar(op.operands[3 + i]) for i in plan.needed]
    header, exitb, iv, phis = lw.loop_head("wsproduce", lb, ub, step, [[ll.Constant(I32, 0)]] + [[x] for x in inits],
                                           is_signed(op.operands[0].dtype))
    j = phis[0][0]
    state = {body.args[i + 1].id: ps[0] for i, ps in zip(plan.needed, phis[1:])}
    sconst = ll.Constant(I32, S)
    slot = b.urem(j, sconst)
    with b.if_then(b.icmp_unsigned(">=", j, sconst)):   # its (j / S)-th fill: the consumers' release before it
        tma.wait(lw, _barrier_at(lw, plan, b.add(slot, sconst)),
                 b.and_(b.add(b.udiv(j, sconst), ll.Constant(I32, 1)), ll.Constant(I32, 1)))
    bindings = dict(state)
    bindings[body.args[0].id] = iv
    # each load's tensor map and offsets (pipeline.address_operands), as pipeline._issue has them
    vals = pipeline._eval(lw, plan.addr_ops, bindings, [(o, None) for lo in plan.loads for o in lo.operands])
    slot_base = b.mul(slot, ll.Constant(I32, plan.stage_bytes))
    copies, k = [], 0
    for lo, tile in zip(plan.loads, plan.tiles):
        n = len(lo.operands)
        dst = tma.smem_address(lw, b.add(slot_base, ll.Constant(I32, lw.smem_reserved + tile.base)))
        copies.append((vals[k], vals[k + 1:k + n], tma.tile_for(lo.result, tile.base), dst))
        k += n
    with b.if_then(b.icmp_unsigned("==", lw.lane, ll.Constant(I32, 0))):
        tma.issue_copies(lw, copies, _barrier_at(lw, plan, slot))
    nxt = pipeline._advance(lw, plan, body, iv, state, lays)
    lw.loop_back(header, iv, step, phis,
                 [[b.add(j, ll.Constant(I32, 1))]] + [[nxt[body.args[i + 1].id]] for i in plan.needed])
    b.position_at_end(exitb)


# -- the kernel's entry and exits ---------------------------------------------------------------

def finish(lw) -> None:
    """After lowering: every consumer `ret` first tells the producer to return; the entry branches
    to the two roles, each resizing its registers first."""
    ws = lw.ws
    if ws is None:
        return
    for blk in list(lw.func.blocks):
        term = blk.terminator
        if blk is ws.exit or not isinstance(term, ll.Ret):
            continue
        b = ll.IRBuilder(blk)
        b.position_before(term)
        b.store(ll.Constant(I64, 0), ws._word(b, 0))
        handoff_barrier(b, ws.all_threads)
    entry = lw.func.blocks[0]
    to_body = entry.terminator
    body = to_body.operands[0]
    entry.instructions.remove(to_body)
    entry.terminator = None
    consumer = lw.func.append_basic_block("ws.consumer")
    producer = lw.func.append_basic_block("ws.producer")
    b = ll.IRBuilder(entry)
    b.cbranch(b.icmp_unsigned(">=", lw.tid, ll.Constant(I32, ws.consumer_threads)), producer, consumer)
    regs = ws.registers()
    for blk, text, target in ((consumer, "inc", body), (producer, "dec", ws.dispatch)):
        b = ll.IRBuilder(blk)
        if regs is not None:
            n = regs[1] if text == "inc" else regs[0]
            b.call(ll.InlineAsm(ll.FunctionType(VOID, []), f"setmaxnreg.{text}.sync.aligned.u32 {n};", "",
                                side_effect=True), [])
        b.branch(target)
