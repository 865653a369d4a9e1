"""`tl.dot` on tensor cores with `mma.sync` (sm_80+): Triton's "MMA v2" path.

The accumulator lives in the MMA layout (the m16n8 fragment of `mma.sync`, tiled over the warps and
then repeated in registers); the operands go through shared memory in a swizzled layout and come
back as fragments with `ldmatrix` (16-bit types, either operand order) or 32-bit shared loads (tf32
operands whose contiguous dim is not K).

Fragment tables (PTX ISA, "Matrix fragments for mma.m16n8k16" / "mma.m16n8k8" .tf32), with
g = lane / 4 and t = lane % 4:
  C (f32, m16n8):       c0,c1 = (g, 2t+{0,1})       c2,c3 = (g+8, 2t+{0,1})
  A (f16/bf16, m16k16): reg0 = (g, 2t+{0,1})  reg1 = (g+8, ..)  reg2 = (g, 8+2t+..)  reg3 = (g+8, 8+2t+..)
  B (f16/bf16, k16n8):  reg0 = (k=2t+{0,1}, n=g)   reg1 = (k=8+2t+{0,1}, n=g)
  A (tf32, m16k8):      reg0 = (g, t)  reg1 = (g+8, t)  reg2 = (g, t+4)  reg3 = (g+8, t+4)
  B (tf32, k8n8):       reg0 = (k=t, n=g)  reg1 = (k=t+4, n=g)
`ldmatrix.x4` loads four 8×8 b16 matrices; lane L supplies the address of row L%8 of matrix L/8,
and receives from matrix j register j holding (row g, b16 columns 2t, 2t+1) — with `.trans`, the
elements (row 2t / 2t+1, column g). So a fragment register is one 8×8 b16 matrix, which for a
32-bit type is 8 rows × 4 elements: the same address pattern serves tf32 with K contiguous.

Shared memory layout of an operand tile [R, C] (C the contiguous dim, `es`-byte elements): row-major
with Triton's XOR swizzle of 16-byte chunks, `chunk ^= (r / per_phase) % max_phase`, which makes the
8 row addresses of every ldmatrix hit 8 distinct 16-byte bank groups. The swizzle is XOR-linear in
the bits of (r, c), so per-bit offsets of a layout's bases still compose by XOR.

The accumulator layout and the tiles are dot_layouts.py's; tests/compiler/tensor_core_model.py runs
this module's address and fragment arithmetic on numpy arrays.
"""
from __future__ import annotations

from llvmlite import ir as ll

from . import f16_accumulator
from .dot_layouts import SmemTile, is_8bit_kind, is_int_kind, mma_acc_layout, mma_kind, warps_per_tile
from .layouts import log2
from .llvm_types import F16, F32, I32, lty


# ---- lane address patterns (coordinates per lane bit) ----------------------------------------

# A coordinates are (m, k); B coordinates are (k, n). kc = elements per 16 bytes.

def ldm_lanes_a(trans: bool, kc: int):
    if not trans:   # rows m, k contiguous: m = L & 15, k = (L >> 4) * kc
        return ((1, 0), (2, 0), (4, 0), (8, 0), (0, kc))
    # rows k, m contiguous (16-bit only): i = L & 7 → k, bit 3 → m + 8, bit 4 → k + 8
    return ((0, 1), (0, 2), (0, 4), (8, 0), (0, 8))


def ldm_lanes_b(trans: bool, kc: int, pair: bool):
    if not trans:   # rows n, k contiguous: n = L & 7, bit 3 → k + kc, bit 4 → next n8 tile
        return ((0, 1), (0, 2), (0, 4), (kc, 0), (0, 8) if pair else (0, 0))
    # rows k, n contiguous: k = L & 15, bit 4 → next n8 tile
    return ((1, 0), (2, 0), (4, 0), (8, 0), (0, 8) if pair else (0, 0))


# scalar (ld.shared.b32) fragment loads for tf32 operands whose contiguous dim is not K
SCALAR_A_LANES = ((0, 1), (0, 2), (1, 0), (2, 0), (4, 0))     # (m, k): t → k, g → m
SCALAR_B_LANES = ((1, 0), (2, 0), (0, 1), (0, 2), (0, 4))     # (k, n): t → k, g → n


def scalar_a_reg(r: int):
    return (8 * (r & 1), 4 * (r >> 1))


def scalar_b_reg(r: int):
    return (4 * r, 0)


def _thread_offset(lw, tile: SmemTile, lane_coords, warp_coords):
    return lw.linear(tuple(tile.offset(c) for c in lane_coords), tuple(tile.offset(c) for c in warp_coords))


def _addr(lw, tile: SmemTile, tv, tm, coord, dyn=None):
    b = lw.b
    off = lw.combine_const(tv, tm, tile.offset(coord))
    byte = b.mul(off, ll.Constant(I32, tile.es))
    if tile.base:
        byte = b.add(byte, ll.Constant(I32, tile.base))
    if dyn is not None:
        byte = b.add(byte, dyn)
    return lw.smem_ptr(byte)


# ---- lowering --------------------------------------------------------------------------------

def _k32_mma_asm(kind: str):
    """mma.sync m16n8k32 on 8-bit operands: fp8 (sm_89+) with fp32 accumulators, or s8 with int32
    ones (saturating on overflow, as Triton's). LLVM's NVPTX has no intrinsic for the fp8 form
    that llvmlite can name, so inline asm with the intrinsic's operand order, for both."""
    if is_int_kind(kind):
        types, acc_t, out = f"satfinite.s32.{kind}.{kind}.s32", I32, "=r"
    else:
        types, acc_t, out = f"f32.{kind}.f32", F32, "=f"
    text = (f"mma.sync.aligned.m16n8k32.row.col.{types} "
            "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
    cons = ",".join([out] * 4 + ["r"] * 6 + ["0", "1", "2", "3"])
    fty = ll.FunctionType(ll.LiteralStructType([acc_t] * 4), [I32] * 6 + [acc_t] * 4)
    return ll.InlineAsm(fty, text, cons)


def dot_from_tiles(lw, op, ta: SmemTile, tb: SmemTile, dyn_base=None):
    """mma.sync over operands already in shared memory (`dyn_base`: an i32 byte offset added to
    both tiles' bases, e.g. the pipeline stage). Sets the dot's result in the MMA layout."""
    kind = mma_kind(op)
    res = op.result
    cl = mma_acc_layout(*res.shape, lw.num_warps)
    # accumulator in fp32 (int32 for an integer dot; fp16 for fp16 operands with an fp16 result)
    acc_t = I32 if is_int_kind(kind) else F16 if f16_accumulator.accumulates_in_f16(op) else F32
    acc = [x if x.type == acc_t else lw.b.fpext(x, F32) for x in lw.block(op.operands[2], cl)]
    acc = accumulate(lw, op, kind, ta, tb, acc, dyn_base)
    odt = lty(res.dtype)
    if odt != acc_t:
        acc = [lw.b.fptrunc(x, odt) for x in acc]
    lw.set_block(res, cl, acc)


def accumulate(lw, op, kind: str, ta: SmemTile, tb: SmemTile, acc: list, dyn_base=None) -> list:
    """`acc` (the registers of the MMA layout, fp32, int32 or fp16) plus the product of the `kind`
    operand tiles of the dot `op`'s shape: the mma.sync instructions over K (an fp16 `acc`: the
    f16.f16 form, its registers packed in pairs)."""
    a = op.operands[0]
    m, n = op.result.shape
    k = a.shape[1]
    nw = lw.num_warps
    cl = mma_acc_layout(m, n, nw)
    wm, wn = warps_per_tile(m, n, nw)
    tm, tn = m // wm, n // wn
    mt_count, nt_count = tm // 16, tn // 8
    b = lw.b
    acc = list(acc)
    es = ta.es                     # the kind's: an fp32 dot's bf16 parts are 2 bytes
    kc = 16 // es                  # elements of one 16-byte fragment row
    kinstr = 2 * kc                # 16 (f16/bf16), 8 (tf32) or 32 (8-bit)

    a_trans = ta.cdim != 1      # A stored with M contiguous
    b_trans = tb.cdim != 0      # B stored with N contiguous
    wbits_m = tuple((c_[0], 0) for c_ in cl.warp)          # warp → (m, k) offset in A
    wbits_n = tuple((0, c_[1]) for c_ in cl.warp)          # warp → (k, n) offset in B
    pair = nt_count % 2 == 0

    if kind == "tf32" and a_trans:
        tva, tma = _thread_offset(lw, ta, SCALAR_A_LANES, wbits_m)
    else:
        tva, tma = _thread_offset(lw, ta, ldm_lanes_a(a_trans, kc), wbits_m)
    if kind == "tf32" and b_trans:
        tvb, tmb = _thread_offset(lw, tb, SCALAR_B_LANES, wbits_n)
    else:
        tvb, tmb = _thread_offset(lw, tb, ldm_lanes_b(b_trans, kc, pair), wbits_n)

    def ldmatrix(ptr, count, trans):
        name = f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.b16"
        st = ll.LiteralStructType([I32] * count)
        r = lw.call(name, st, [ptr])
        return [b.extract_value(r, i) for i in range(count)]

    def load_a(mi, k0):
        base = (16 * mi, k0)
        if kind == "tf32" and a_trans:
            out = []
            for r in range(4):
                dm, dk = scalar_a_reg(r)
                out.append(b.load(_addr(lw, ta, tva, tma, (base[0] + dm, base[1] + dk), dyn_base), typ=I32, align=4))
            return out
        return ldmatrix(_addr(lw, ta, tva, tma, base, dyn_base), 4, a_trans)

    def load_b(ni, k0):
        """B fragments (2 regs each) for n8 tile ni (and ni+1 when paired)."""
        base = (k0, 8 * ni)
        if kind == "tf32" and b_trans:
            out = []
            for t in ((ni, ni + 1) if pair else (ni,)):
                for r in range(2):
                    dk, dn = scalar_b_reg(r)
                    out.append(b.load(_addr(lw, tb, tvb, tmb, (k0 + dk, 8 * t + dn), dyn_base), typ=I32, align=4))
            return out
        return ldmatrix(_addr(lw, tb, tvb, tmb, base, dyn_base), 4 if pair else 2, b_trans)

    nbits = log2(nt_count)
    per = 4                        # accumulator values of one instruction (an m16n8 tile)
    ret = ll.LiteralStructType([F32] * 4)
    h2 = f16_accumulator.H2
    f16_acc = acc and acc[0].type == F16
    if f16_acc:                    # two f16x2 words an instruction
        name = "llvm.nvvm.mma.m16n8k16.row.col.f16.f16"
        conv = (lambda x: b.bitcast(x, h2))  # noqa: E731
        tys = [h2] * 8
        ret = ll.LiteralStructType([h2] * 2)
        acc, per = f16_accumulator.pack(b, acc, h2), 2
    elif kind == "f16":
        name = "llvm.nvvm.mma.m16n8k16.row.col.f32.f32"
        conv = (lambda x: b.bitcast(x, h2))  # noqa: E731
        tys = [h2] * 6 + [F32] * 4
    elif kind == "bf16":
        name = "llvm.nvvm.mma.m16n8k16.row.col.bf16"
        conv = (lambda x: x)  # noqa: E731
        tys = [I32] * 6 + [F32] * 4
    elif kind == "tf32":
        name = "llvm.nvvm.mma.m16n8k8.row.col.tf32"
        conv = (lambda x: x)  # noqa: E731
        tys = [I32] * 6 + [F32] * 4
    if is_8bit_kind(kind):  # K-major tiles (dot_layouts.operand_tiles): the f16 ldmatrix pattern, 4 bytes per b32
        conv = (lambda x: x)  # noqa: E731
        fn = _k32_mma_asm(kind)
    else:
        fn = lw.intrinsic(name, ret, tys)

    for k0 in range(0, k, kinstr):
        afr = [[conv(x) for x in load_a(mi, k0)] for mi in range(mt_count)]
        bfr = []
        step = 2 if pair else 1
        for ni in range(0, nt_count, step):
            regs = [conv(x) for x in load_b(ni, k0)]
            bfr.append(regs[0:2])
            if pair:
                bfr.append(regs[2:4])
        for mi in range(mt_count):
            for ni in range(nt_count):
                base = ((mi << nbits) | ni) * per
                r = b.call(fn, afr[mi] + bfr[ni] + acc[base:base + per])
                for e in range(per):
                    acc[base + e] = b.extract_value(r, e)
    return f16_accumulator.unpack(b, acc) if f16_acc else acc
