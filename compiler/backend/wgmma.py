"""`tl.dot` with Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a) — the default on sm_90
(`knobs.codegen.wgmma`: BLOCKTUNE_WGMMA=0 falls back to mma.sync).

Operands come from shared memory through matrix descriptors (no ldmatrix): the tiles are
dot_layouts.SmemTile with `panels=True`, i.e. wgmma's canonical swizzled layouts — K-major or MN-major
(`imm-trans-a/b`), swizzle width 128/64/32 bytes, `panel_cols` elements of the contiguous dim per
panel, 8-row groups of 8 × swizzle bytes. Descriptor (PTX ISA "Matrix Descriptor Format"):
  bits 0-13  start address >> 4      bits 16-29  leading-dimension byte offset >> 4
  bits 32-45 stride-dimension byte offset >> 4       bits 62-63 swizzle (1: 128B, 2: 64B, 3: 32B)
with SBO = 8 rows × swizzle bytes (the next 8-row / 8-k group) and LBO = one panel
(rows × swizzle bytes; the next 64 elements of an MN-major operand; unused for K-major).

Warps: groups of 4 (warpgroups) split M first (64 rows each), then N; one instruction is
m64 n(N / wg_n) k16 and the warpgroup repeats it over M / (64 wg_m) row blocks. The accumulator
layout per instruction is the mma.sync m16n8 fragment repeated over n8 tiles (register order =
the instruction's d0, d1, …), warps of a warpgroup at rows +16, +32.

Which dots use it and their accumulator layout: dot_layouts.py. The dot is synchronous (wgmma.fence;
mma_async × (K/16 × reps); commit_group; wait_group 0 with the accumulators passed through the wait
so nothing reads them early), except in the pipeline (pipeline.py), which keeps one group in flight
across K iterations (knobs.codegen.wgmma "async").
"""
from __future__ import annotations

from llvmlite import ir as ll

from . import f16_accumulator
from .dot_layouts import is_8bit_kind, is_fp8_kind, is_int_kind, mma_kind, wgmma_acc_layout, wgmma_config
from .layouts import log2
from .llvm_types import CONTRACT, F16, F32, I32, I64, lty

SWIZZLE_MODE = {128: 1, 64: 2, 32: 3}


def descriptor_const(tile) -> int:
    """The descriptor bits that do not depend on the start address."""
    swz = tile.swz
    sbo = (8 * swz) >> 4
    lbo = (tile.rows * swz) >> 4
    return (SWIZZLE_MODE[swz] << 62) | (sbo << 32) | ((lbo & 0x3FFF) << 16)


def _scale_d(index: int, from_zero: bool) -> tuple[str, str]:
    """The scale-d operand and the text that sets it: the immediate 0 for a dot that starts from
    zero (the accumulator registers are then outputs only: no zeros moved into them, and ptxas
    needs no wait to keep them), else a predicate from operand $index."""
    if from_zero:
        return "", "0"
    return "\n\t.reg .pred p;\n\tsetp.ne.b32 p, $" + str(index) + ", 0;", "p"


def _accumulator_constraints(n_out: int, from_zero: bool, acc_t=F32) -> tuple[list[str], list]:
    """The accumulators in: tied to the outputs, or nothing when the dot starts from zero."""
    if from_zero:
        return [], []
    return [str(i) for i in range(n_out)], [acc_t] * n_out


def accumulator_type(kind):
    """fp32 accumulators, or int32 (b32 registers) for an integer dot."""
    return I32 if is_int_kind(kind) else F32


def _wgmma_asm(n_out: int, shape_n: int, ty: str, trans_a: int, trans_b: int, from_zero: bool = False,
               f16_acc: bool = False):
    """`f16_acc`: fp16 accumulators, `n_out` b32 registers of f16x2 pairs."""
    outs = ", ".join(f"${i}" for i in range(n_out))
    d = "f16" if f16_acc else "f32"
    if is_int_kind(ty):  # s8 × s8 → s32, k32, K-major operands: no scale or transpose immediates
        shape, types, tail = f"m64n{shape_n}k32", f"s32.{ty}.{ty}", ""
    elif is_fp8_kind(ty):  # k32, K-major operands only: no transpose immediates
        shape, types, tail = f"m64n{shape_n}k32", f"f32.{ty}", ", 1, 1"
    else:
        shape, types, tail = f"m64n{shape_n}k16", f"{d}.{ty}.{ty}", f", 1, 1, {trans_a}, {trans_b}"
    setp, scale_d = _scale_d(n_out + 2, from_zero)
    text = ("{" + setp + "\n\t"
            f"wgmma.mma_async.sync.aligned.{shape}.{types} "
            f"{{{outs}}}, ${n_out}, ${n_out + 1}, {scale_d}{tail};\n\t}}")
    acc_t = I32 if f16_acc else accumulator_type(ty)
    tied, acc_types = _accumulator_constraints(n_out, from_zero, acc_t)
    cons = ",".join(["=r" if acc_t == I32 else "=f"] * n_out + ["l", "l"] + ([] if from_zero else ["r"]) + tied)
    args = [I64, I64] + ([] if from_zero else [I32]) + acc_types
    fty = ll.FunctionType(ll.LiteralStructType([acc_t] * n_out), args)
    return ll.InlineAsm(fty, text, cons, side_effect=True)


def promotion_interval(op, k: int) -> int | None:
    """Every how many K elements an fp8 wgmma's partial sums are added into the fp32 accumulator
    (Triton's max_num_imprecise_acc on Hopper), or None: the tensor core accumulates the whole dot
    (fp8 accumulation inside wgmma keeps fewer bits than fp32, as in Triton by default on sm_90).
    Intervals below one instruction's K (32) promote after every instruction."""
    n = op.attrs.get("max_num_imprecise_acc")
    if not is_fp8_kind(mma_kind(op)) or not n or n >= 1 << 30:
        return None
    return min(k, max(32, n // 32 * 32))


def _wgmma_asm_reg_a(n_out: int, shape_n: int, ty: str, trans_b: int, from_zero: bool = False,
                     f16_acc: bool = False):
    """wgmma with A from registers: four b32 registers of packed pairs (the mma.m16n8k16 A fragment
    of each warp's 16 rows), B from a descriptor (no trans-a operand in this form). `f16_acc`: fp16
    accumulators, `n_out` b32 registers of f16x2 pairs."""
    outs = ", ".join(f"${i}" for i in range(n_out))
    a = ", ".join(f"${n_out + i}" for i in range(4))
    setp, scale_d = _scale_d(n_out + 5, from_zero)
    text = ("{" + setp + "\n\t"
            f"wgmma.mma_async.sync.aligned.m64n{shape_n}k16.{'f16' if f16_acc else 'f32'}.{ty}.{ty} "
            f"{{{outs}}}, {{{a}}}, ${n_out + 4}, {scale_d}, 1, 1, {trans_b};\n\t}}")
    acc_t = I32 if f16_acc else F32
    tied, acc_types = _accumulator_constraints(n_out, from_zero, acc_t)
    cons = ",".join(["=r" if f16_acc else "=f"] * n_out + ["r"] * 4 + ["l"] + ([] if from_zero else ["r"]) + tied)
    args = [I32] * 4 + [I64] + ([] if from_zero else [I32]) + acc_types
    fty = ll.FunctionType(ll.LiteralStructType([acc_t] * n_out), args)
    return ll.InlineAsm(fty, text, cons, side_effect=True)


def _is_zero(values) -> bool:
    """Every value the constant +0.0 (a dot without an accumulator, or with tl.zeros; an fp16 one is
    the fptrunc of an fp32 constant)."""
    values = [v.operands[0] if isinstance(v, ll.CastInstr) and v.opname == "fptrunc" else v for v in values]
    return all(isinstance(v, ll.Constant) and v.constant is not None and v.constant == 0.0
               and str(v.constant) != "-0.0" for v in values)


def a_fragment_registers(k: int, rep: int, k0: int) -> list[int]:
    """The registers a0…a7 of the A fragment of row block `rep`, k columns k0…k0+15, in an [M, K]
    wgmma accumulator layout: its register bits are (0,1) (8,0) (0,8), then the k16 chunks, then the
    row blocks, so the fragment is 8 consecutive registers in the fragment's order."""
    first = (rep << (2 + log2(k // 8))) + (k0 // 16) * 8
    return list(range(first, first + 8))


def a_from_registers(op, a_lay, options) -> bool:
    """A can feed wgmma straight from registers: a 16-bit block in the accumulator layout of an
    [M, K] wgmma result (a previous dot's output, e.g. attention's P) whose warpgroups hold whole
    rows — each thread then owns exactly its A fragments (FlashAttention-3's register reuse)."""
    a = op.operands[0]
    if a.dtype.primitive_bitwidth != 16 or not a.shape[1] % 16 == 0:
        return False
    m, k = a.shape
    cfg = wgmma_config(m, k, options.num_warps)
    return cfg is not None and cfg[1] == 1 and a_lay == wgmma_acc_layout(m, k, options.num_warps)


def wait_pass_through(lw, regs, pending: int):
    """wgmma.wait_group(pending) with the accumulators routed through it (so that nothing reads
    them before the wait)."""
    return _routed_through(lw, regs, f"wgmma.wait_group.sync.aligned {pending};")


def _routed_through(lw, regs, text: str):
    """fp32, b32 or fp16 registers (each its own type: a float and an integer dot's accumulators may
    pass together) through the inline asm `text`, tied in and out: the values after it. fp16 values
    (an fp16 accumulator's, consecutive pairs) pass as the f16x2 words wgmma holds them in."""
    b = lw.b
    words, sizes, i = [], [], 0
    while i < len(regs):
        n = 2 if regs[i].type == F16 else 1
        words += f16_accumulator.pack(b, regs[i:i + 2]) if n == 2 else [regs[i]]
        sizes.append(n)
        i += n
    types = [w.type for w in words]
    cons = ",".join(["=f" if t == F32 else "=r" for t in types] + [str(i) for i in range(len(words))])
    fty = ll.FunctionType(ll.LiteralStructType(types), types)
    r = b.call(ll.InlineAsm(fty, text, cons, side_effect=True), words)
    out = []
    for i, n in enumerate(sizes):
        w = b.extract_value(r, i)
        out += f16_accumulator.unpack(b, [w]) if n == 2 else [w]
    return out


def held_in_registers(lw, regs):
    """`regs` through an empty inline asm: values LLVM cannot rematerialize. An async wgmma
    accumulator's loop-entry values (attention's zeros) then stay in the registers the loop uses,
    set before it; as constants LLVM re-creates them on the zero-trip edge into the exit, where the
    movs sit between the loop's last wgmma and its wait in the code, and ptxas then serializes every
    wgmma of the function (C7515)."""
    return _routed_through(lw, regs, "")


def dot_from_tiles(lw, op, ta, tb, dyn_base=None, pending: int | None = 0, a_regs=None, also_wait=()):
    """wgmma over operand tiles in shared memory; sets the dot's result in acc_layout. `pending`:
    how many wgmma groups may still run when this returns (1: the result is only fed back into the
    next wgmma; the pipeline waits for it at the loop exit; None: no wait at all, a later dot's
    `also_wait` takes the result). `a_regs` (with ta None): A's registers
    in its accumulator layout (a_from_registers) instead of a tile. `dyn_base`: an i32 byte offset
    added to both tiles, or a pair (A's, B's; None for none). `also_wait`: fp32 registers of an
    earlier wgmma still in flight, routed through this dot's wait too; returned, to be read instead."""
    a, bv, c = op.operands
    res = op.result
    m, n = res.shape
    k = a.shape[1]
    nw = lw.num_warps
    wg_m, wg_n, tn, reps = wgmma_config(m, n, nw)
    cl = wgmma_acc_layout(m, n, nw)
    b = lw.b
    lw.needs_sm90a = True
    ty = mma_kind(op)
    C = lw.block(c, cl)
    f16_acc = f16_accumulator.accumulates_in_f16(op)
    acc_t = F16 if f16_acc else accumulator_type(ty)
    acc = [x if x.type == acc_t else b.fpext(x, F32) for x in C]

    # warpgroup part of the start coordinates (warp bits 2.. of the accumulator layout)
    wa = tuple((0, 0) if i < 2 else (cw[0], 0) for i, cw in enumerate(cl.warp))
    wb = tuple((0, 0) if i < 2 else (0, cw[1]) for i, cw in enumerate(cl.warp))
    if a_regs is None:
        tva, tma = lw.linear((0,) * 5, tuple(ta.offset(x) for x in wa))
    tvb, tmb = lw.linear((0,) * 5, tuple(tb.offset(x) for x in wb))
    smem_base = b.ptrtoint(lw.smem, I32)
    if lw.smem_reserved:
        smem_base = b.add(smem_base, ll.Constant(I32, lw.smem_reserved))

    # one dynamic base for both tiles, or (A's, B's)
    dyn_a, dyn_b = dyn_base if isinstance(dyn_base, tuple) else (dyn_base, dyn_base)

    def full_desc(tile, tv, tm, c, const, dyn):
        off = lw.combine_const(tv, tm, c)
        byte = b.add(b.mul(off, ll.Constant(I32, tile.es)), ll.Constant(I32, tile.base))
        if dyn is not None:
            byte = b.add(byte, dyn)
        byte = b.add(byte, smem_base)
        addr = b.and_(b.lshr(byte, ll.Constant(I32, 4)), ll.Constant(I32, 0x3FFF))
        return b.or_(b.zext(addr, I64), ll.Constant(I64, const))

    base_desc = {}

    def desc(tile, tv, tm, coord, const, dyn):
        """The descriptor of the tile's sub-matrix at `coord`: the tile's first descriptor plus the
        offset in 16-byte units where the offset adds (its bits are not the warpgroup's; the
        14-bit address field cannot carry, shared memory being under 256 KiB) — one 64-bit add
        per wgmma instead of the address arithmetic, as Triton does."""
        c = tile.offset(coord)
        if c & tm or (c * tile.es) % 16:
            return full_desc(tile, tv, tm, c, const, dyn)
        key = (id(tile), id(dyn))
        if key not in base_desc:
            base_desc[key] = full_desc(tile, tv, tm, 0, const, dyn)
        return b.add(base_desc[key], ll.Constant(I64, c * tile.es >> 4)) if c else base_desc[key]

    db = descriptor_const(tb)
    trans_b = 1 if tb.cdim == 1 else 0   # B stored N-major
    per = tn // 4 if f16_acc else tn // 2   # accumulator registers of one instruction
    kstep = 32 if is_8bit_kind(ty) else 16
    if a_regs is None:
        da = descriptor_const(ta)
        trans_a = 1 if ta.cdim == 0 else 0   # A stored M-major
        asm = {z: _wgmma_asm(per, tn, ty, trans_a, trans_b, z, f16_acc) for z in (False, True)}
    else:
        asm = {z: _wgmma_asm_reg_a(per, tn, ty, trans_b, z, f16_acc) for z in (False, True)}
        pair = ll.VectorType(a_regs[0].type, 2)

        def packed(r0, r1):
            v = b.insert_element(ll.Constant(pair, None), a_regs[r0], ll.Constant(I32, 0))
            return b.bitcast(b.insert_element(v, a_regs[r1], ll.Constant(I32, 1)), I32)
        # every A fragment packed before the fence and routed through it: written between the
        # wgmmas, ptxas fences (WARPGROUP.ARRIVE) before each one that reads them
        keys = [(rep, k0) for k0 in range(0, k, kstep) for rep in range(reps)]
        frags = []
        for rep, k0 in keys:
            f = a_fragment_registers(k, rep, k0)
            frags += [packed(f[i], f[i + 1]) for i in range(0, 8, 2)]
        frags = _routed_through(lw, frags, "wgmma.fence.sync.aligned;")
        a_packed = {key: frags[4 * i:4 * i + 4] for i, key in enumerate(keys)}

    def mma(regs, rep, k0, dB, scale_d):
        """One wgmma of row block `rep` at k0 into `regs` (scale_d 0: start from zero; None: the
        immediate 0 with `regs` not read)."""
        head = [dB] if scale_d is None else [dB, scale_d]
        tail = [] if scale_d is None else regs
        if a_regs is None:
            dA = desc(ta, tva, tma, (rep * 64 * wg_m, k0), da, dyn_a)
            r = b.call(asm[scale_d is None], [dA] + head + tail)
        else:
            r = b.call(asm[scale_d is None], a_packed[(rep, k0)] + head + tail)
        return [b.extract_value(r, i) for i in range(per)]

    promote = promotion_interval(op, k)
    one = ll.Constant(I32, 1)
    if a_regs is None:   # (else the fence was the A fragments')
        lw.call("llvm.nvvm.wgmma.fence.sync.aligned", ll.VoidType(), [])
    if promote is None:
        from_zero = _is_zero(acc)
        if f16_acc:   # the instructions' f16x2 words
            acc = f16_accumulator.pack(b, acc)
        for k0 in range(0, k, kstep):
            dB = desc(tb, tvb, tmb, (k0, 0), db, dyn_b)
            for rep in range(reps):
                acc[rep * per:(rep + 1) * per] = mma(acc[rep * per:(rep + 1) * per], rep, k0, dB,
                                                     None if from_zero and k0 == 0 else one)
        lw.call("llvm.nvvm.wgmma.commit_group.sync.aligned", ll.VoidType(), [])
        if f16_acc:   # one value an element again (a wait packs them back: the words stay)
            acc = f16_accumulator.unpack(b, acc)
        if pending is None:   # still running: a later dot's wait takes these registers (also_wait)
            assert not also_wait
            waited = []
        else:
            waited = wait_pass_through(lw, acc + list(also_wait), pending)
            acc, waited = waited[:len(acc)], waited[len(acc):]
    else:
        # an earlier group may still write acc (or also_wait's registers)
        waited = wait_pass_through(lw, acc + list(also_wait), 0)
        acc, waited = waited[:len(acc)], waited[len(acc):]
        for c0 in range(0, k, promote):
            part = [None] * len(acc)  # not read: each chunk's first wgmma starts from zero
            for k0 in range(c0, c0 + promote, kstep):
                dB = desc(tb, tvb, tmb, (k0, 0), db, dyn_b)
                for rep in range(reps):
                    part[rep * per:(rep + 1) * per] = mma(part[rep * per:(rep + 1) * per], rep, k0, dB,
                                                          None if k0 == c0 else one)
            lw.call("llvm.nvvm.wgmma.commit_group.sync.aligned", ll.VoidType(), [])
            part = wait_pass_through(lw, part, 0)
            acc = [b.fadd(x, y, flags=CONTRACT) for x, y in zip(acc, part)]
    odt = lty(res.dtype)
    if odt != acc_t:
        acc = [b.fptrunc(x, odt) for x in acc]
    lw.set_block(res, cl, acc)
    return waited


def proxy_fence(lw):
    """Make this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to
    wgmma's async proxy; executed by the writers before the barrier that precedes the wgmma."""
    lw.call("llvm.nvvm.fence.proxy.async.shared_cta", ll.VoidType(), [])
