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

`mma_sim` at the end is a numpy model of all of this (used by tests/compiler/test_dot_mma.py).
"""
from __future__ import annotations

from llvmlite import ir as ll

import threading

from .layouts import Layout, log2

I32 = ll.IntType(32)
_target = threading.local()   # the compile's target (set by nvptx.lower_to_llvm through configure)


def configure(target: str | None) -> None:
    _target.name = target


def use_wgmma(op, num_warps: int) -> bool:
    """wgmma (compiler/backend/wgmma.py) instead of mma.sync for this dot."""
    from . import wgmma
    return wgmma.enabled(getattr(_target, "name", None)) and wgmma.eligible(op, num_warps)
F32 = ll.FloatType()
F16 = ll.HalfType()

KINDS = {"fp16": "f16", "bf16": "bf16"}


def mma_kind(op) -> str | None:
    """'f16' | 'bf16' | 'tf32' when this dot can run on mma.sync, else None (FMA path)."""
    a, b, c = op.operands
    res = op.result
    adt = a.dtype.name
    if a.dtype.name != b.dtype.name or res.dtype.name not in ("fp32", "fp16", "bf16"):
        return None
    m, n = res.shape
    k = a.shape[1]
    if min(m, n, k) < 16:
        return None
    if adt in KINDS:
        return KINDS[adt]
    if adt == "fp32" and op.attrs.get("input_precision", "ieee") == "tf32":
        return "tf32"
    return None


def warps_per_tile(m: int, n: int, num_warps: int) -> tuple[int, int]:
    """Split warps over (M, N) like Triton's warpsPerTileV2, with a warp tile ≥ 16×16
    (so that B fragments pair into ldmatrix.x4). Leftover warps replicate."""
    wm = wn = 1
    while wm * wn < num_warps:
        can_m, can_n = m // (16 * wm) >= 2, n // (16 * wn) >= 2
        if not (can_m or can_n):
            break
        if can_m and (m // (16 * wm) >= n // (8 * wn) or not can_n):
            wm *= 2
        else:
            wn *= 2
    return wm, wn


def acc_layout(m: int, n: int, num_warps: int) -> Layout:
    """The MMA v2 accumulator layout of an [m, n] block: register bits (0,1), (8,0), then the
    warp's n8 tiles, then its m16 tiles; lanes as in the fragment table; warps split M then N,
    each owning a contiguous [m/wm, n/wn] tile."""
    wm, wn = warps_per_tile(m, n, num_warps)
    tm, tn = m // wm, n // wn
    reg = [(0, 1), (8, 0)]
    reg += [(0, 8 << i) for i in range(log2(tn // 8))]
    reg += [(16 << i, 0) for i in range(log2(tm // 16))]
    lane = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
    warp = [(tm << i, 0) for i in range(log2(wm))] + [(0, tn << i) for i in range(log2(wn))]
    warp += [(0, 0)] * (log2(num_warps) - len(warp))
    return Layout((m, n), tuple(reg), lane, tuple(warp))


def acc_layout_for(op, num_warps: int) -> Layout | None:
    """The layout assignment's anchor for a dot result (None: not an MMA dot)."""
    if mma_kind(op) is None:
        return None
    m, n = op.result.shape
    if use_wgmma(op, num_warps):
        from . import wgmma
        return wgmma.acc_layout(m, n, num_warps)
    return acc_layout(m, n, num_warps)


# ---- swizzled shared-memory tiles ----------------------------------------------------------------

class SmemTile:
    """An operand tile [R, C] in shared memory, C = shape[cdim] contiguous, 16-byte chunks swizzled.

    The layout is the one wgmma's descriptors describe (and ldmatrix reads without bank
    conflicts): the contiguous dim is cut into panels of `swz` bytes (128, or the whole row when
    shorter: 32/64), each panel holds R rows of `swz` bytes, and within a 1024-byte-aligned group
    of 8 rows chunk c of row r sits at chunk `c ^ (r / per_phase) % max_phase` — the hardware's
    address-based swizzle (bits [4:6] ^= bits [7:9] for 128 bytes). Tile bases are multiples of
    1024 bytes. `panels=False` (the mma.sync path) keeps rows whole: same swizzle, no panels."""

    def __init__(self, shape: tuple, cdim: int, es: int, base: int = 0, panels: bool = False):
        self.shape, self.cdim, self.es, self.base = tuple(shape), cdim, es, base
        self.cols = shape[cdim]
        self.rows = shape[1 - cdim]
        self.vec = max(1, 16 // es)                      # elements per 16-byte chunk
        self.swz = min(self.cols * es, 128)              # swizzle width in bytes (32, 64 or 128)
        # without panels (the mma.sync path) rows stay whole; wgmma needs the panels
        self.panel_cols = self.swz // es if panels else self.cols
        self.per_phase = max(1, 128 // self.swz)
        self.max_phase = max(1, self.swz // 16)
        self.nbytes = shape[0] * shape[1] * es

    def offset(self, coord: tuple) -> int:
        """Element offset (from the tile's base) of a coordinate; XOR-linear in the coordinate bits."""
        r, c = (coord[1 - self.cdim], coord[self.cdim])
        phase = (r // self.per_phase) % self.max_phase
        pc = self.panel_cols
        return (c // pc) * (self.rows * pc) + r * pc + ((c % pc) ^ (phase * self.vec))

    def byte_offset(self, coord: tuple) -> int:
        return self.base + self.offset(coord) * self.es


def contiguous_dim(lay: Layout) -> int:
    """The dim along which a thread's first registers (else its lanes) advance: the order the
    value came from memory in, so that writing it to shared memory vectorizes."""
    for group in (lay.reg, lay.lane):
        for b in group:
            nz = [d for d, x in enumerate(b) if x]
            if nz:
                return nz[0]
    return len(lay.shape) - 1


def write_tile(lw, vals: list, lay: Layout, tile: SmemTile, mt: ll.Type):
    """Store a block held in `lay` into the swizzled tile (vectorized along the contiguous dim)."""
    b = lw.b
    es = tile.es
    lane_off = tuple(tile.offset(c) for c in lay.lane)
    warp_off = tuple(tile.offset(c) for c in lay.warp)
    tv, tm = lw._linear(lane_off, warp_off)
    reg_off = [tile.offset(c) for c in lay.reg]
    tmask = 0
    for o in lane_off + warp_off:
        tmask |= o
    v = 1
    k = 0
    while (k < len(reg_off) and reg_off[k] == 1 << k and (v * 2) * es <= 16 and (v * 2) <= tile.vec):
        k += 1
        v *= 2
    while v > 1 and (tmask & (v - 1) or any(o & (v - 1) for o in reg_off[log2(v):])):
        v //= 2
    for g in range(0, lay.n_regs, v):
        c = 0
        for i, o in enumerate(reg_off):
            if g >> i & 1:
                c ^= o
        off = lw.combine_const(tv, tm, c)
        ptr = lw.smem_ptr(b.add(b.mul(off, ll.Constant(I32, es)), ll.Constant(I32, tile.base)) if tile.base else b.mul(off, ll.Constant(I32, es)))
        if v == 1:
            val = vals[g]
        else:
            val = ll.Constant(ll.VectorType(mt, v), None)
            for j in range(v):
                val = b.insert_element(val, vals[g + j], ll.Constant(I32, j))
        b.store(val, ptr, align=es * v)


def _thread_offset(lw, tile: SmemTile, lane_coords, warp_coords):
    return lw._linear(tuple(tile.offset(c) for c in lane_coords), tuple(tile.offset(c) for c in warp_coords))


def _addr(lw, tile: SmemTile, tv, tm, coord, dyn=None):
    b = lw.b
    off = lw.combine_const(tv, tm, tile.offset(coord))
    byte = b.mul(off, ll.Constant(I32, tile.es))
    if tile.base:
        byte = b.add(byte, ll.Constant(I32, tile.base))
    if dyn is not None:
        byte = b.add(byte, dyn)
    return lw.smem_ptr(byte)


# ---- lane address patterns (coordinates per lane bit) ----------------------------------------------
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


# ---- lowering ----------------------------------------------------------------------------------------

def operand_tiles(op, a_lay: Layout, b_lay: Layout, num_warps: int, base: int = 0) -> tuple:
    """The swizzled shared-memory tiles of a dot's operands (A first, B 1024-byte aligned after it),
    each stored along the contiguous dim of the layout it arrives in."""
    from .nvptx import esize
    a, bv = op.operands[0], op.operands[1]
    m, k = a.shape
    n = bv.shape[1]
    es = esize(a.dtype)
    panels = use_wgmma(op, num_warps)
    ta = SmemTile((m, k), contiguous_dim(a_lay), es, base=base, panels=panels)
    tb = SmemTile((k, n), contiguous_dim(b_lay), es, base=base + (ta.nbytes + 1023) // 1024 * 1024, panels=panels)
    return ta, tb


def tiles_end(ta: SmemTile, tb: SmemTile) -> int:
    return tb.base + tb.nbytes


def lower_dot(lw, op):
    """Register operands → shared memory (between two barriers) → mma.sync."""
    from .nvptx import lty
    kind = mma_kind(op)
    a, bv = op.operands[0], op.operands[1]
    a_lay, b_lay = lw.layout_of(a), lw.layout_of(bv)
    a_regs, b_regs = lw.block(a, a_lay), lw.block(bv, b_lay)
    ta, tb = operand_tiles(op, a_lay, b_lay, lw.num_warps)
    if kind == "tf32":   # round once, at the write (cvt.rna.tf32.f32), and keep the bits as i32
        a_regs = [lw.call("llvm.nvvm.f2tf32.rna", I32, [x]) for x in a_regs]
        b_regs = [lw.call("llvm.nvvm.f2tf32.rna", I32, [x]) for x in b_regs]
        mt = I32
    else:
        mt = lty(a.dtype)
    lw.smem_bytes = max(lw.smem_bytes, tiles_end(ta, tb))
    lw.barrier()
    write_tile(lw, a_regs, a_lay, ta, mt)
    write_tile(lw, b_regs, b_lay, tb, mt)
    if use_wgmma(op, lw.num_warps):
        from . import wgmma
        wgmma.proxy_fence(lw)
    lw.barrier()
    dot_from_tiles(lw, op, ta, tb)


def dot_from_tiles(lw, op, ta: SmemTile, tb: SmemTile, dyn_base=None):
    """mma.sync over operands already in shared memory (`dyn_base`: an i32 byte offset added to
    both tiles' bases, e.g. the pipeline stage). Sets the dot's result in the MMA layout."""
    if use_wgmma(op, lw.num_warps):
        from . import wgmma
        return wgmma.dot_from_tiles(lw, op, ta, tb, dyn_base)
    from .nvptx import esize, lty  # noqa: WPS433  (nvptx imports the layout assignment, which imports us)
    kind = mma_kind(op)
    a, bv, c = op.operands
    res = op.result
    m, n = res.shape
    k = a.shape[1]
    nw = lw.num_warps
    cl = acc_layout(m, n, nw)
    wm, wn = warps_per_tile(m, n, nw)
    tm, tn = m // wm, n // wn
    mt_count, nt_count = tm // 16, tn // 8
    b = lw.b
    es = esize(a.dtype)
    kc = 16 // es                  # elements of one 16-byte fragment row
    kinstr = 2 * kc                # 16 (f16/bf16) or 8 (tf32)

    # accumulator in fp32
    C = lw.block(c, cl)
    acc = [x if x.type == F32 else b.fpext(x, F32) for x in C]

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
    if kind == "f16":
        h2 = ll.VectorType(F16, 2)
        name = "llvm.nvvm.mma.m16n8k16.row.col.f32.f32"
        conv = (lambda x: b.bitcast(x, h2))  # noqa: E731
        tys = [h2] * 6 + [F32] * 4
    elif kind == "bf16":
        name = "llvm.nvvm.mma.m16n8k16.row.col.bf16"
        conv = (lambda x: x)  # noqa: E731
        tys = [I32] * 6 + [F32] * 4
    else:
        name = "llvm.nvvm.mma.m16n8k8.row.col.tf32"
        conv = (lambda x: x)  # noqa: E731
        tys = [I32] * 6 + [F32] * 4
    ret = ll.LiteralStructType([F32] * 4)
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
                base = ((mi << nbits) | ni) << 2
                r = b.call(fn, afr[mi] + bfr[ni] + acc[base:base + 4])
                for e in range(4):
                    acc[base + e] = b.extract_value(r, e)
    odt = lty(res.dtype)
    if odt != F32:
        acc = [b.fptrunc(x, odt) for x in acc]
    lw.set_block(res, cl, acc)


# ---- a numpy model of the lowering (for tests) --------------------------------------------------------

def mma_sim(A, B, Cin, num_warps: int, kind: str, a_cdim: int, b_cdim: int):
    """Run the lowering's address and fragment arithmetic on numpy arrays: write A [M,K] and
    B [K,N] into swizzled tiles (flat arrays), have every (warp, lane) 'execute' the ldmatrix /
    scalar loads at the addresses lower_dot computes, apply the mma.sync fragment semantics from
    the PTX tables, and scatter the accumulators back through acc_layout. Returns D [M,N] and the
    number of ldmatrix bank-conflict wavefronts beyond the minimum (0 when the swizzle works)."""
    import numpy as np
    M, K = A.shape
    N = B.shape[1]
    es = 4 if kind == "tf32" else 2
    kc = 16 // es
    kinstr = 2 * kc
    cl = acc_layout(M, N, num_warps)
    wm, wn = warps_per_tile(M, N, num_warps)
    tm, tn = M // wm, N // wn
    mt_count, nt_count = tm // 16, tn // 8
    pair = nt_count % 2 == 0
    ta, tb = SmemTile((M, K), a_cdim, es), SmemTile((K, N), b_cdim, es)
    sa, sb = np.full(M * K, np.nan), np.full(K * N, np.nan)
    for i in range(M):
        for j in range(K):
            sa[ta.offset((i, j))] = A[i, j]
    for i in range(K):
        for j in range(N):
            sb[tb.offset((i, j))] = B[i, j]
    assert not np.isnan(sa).any() and not np.isnan(sb).any(), "swizzle is not a bijection"
    a_trans, b_trans = a_cdim != 1, b_cdim != 0
    conflicts = 0

    def xor_coord(*cs):
        out = [0, 0]
        for c in cs:
            out[0] ^= c[0]
            out[1] ^= c[1]
        return tuple(out)

    def lane_coord(lanes, L):
        return xor_coord(*[lanes[i] for i in range(5) if L >> i & 1])

    def warp_coord(w, sel):
        return xor_coord(*[sel(cl.warp[i]) for i in range(len(cl.warp)) if w >> i & 1])

    def ldmatrix(smem, tile, addrs, count, trans):
        """addrs[L] = element offset of the row lane L points at; returns regs[L][j] = 2 elements
        (a b16 pair; for 32-bit types 1 element, as a 1-list)."""
        nonlocal conflicts
        per = 16 // es  # elements per row
        regs = [[None] * count for _ in range(32)]
        for j in range(count):
            rows = [smem[addrs[8 * j + i]: addrs[8 * j + i] + per] for i in range(8)]
            banks = {}
            for i in range(8):
                byte = addrs[8 * j + i] * es
                assert byte % 16 == 0
                banks.setdefault((byte // 16) % 8, set()).add(byte // 128)
            conflicts += max(len(v) for v in banks.values()) - 1
            for L in range(32):
                g, t = L // 4, L % 4
                if es == 2:
                    if not trans:
                        regs[L][j] = [rows[g][2 * t], rows[g][2 * t + 1]]
                    else:
                        regs[L][j] = [rows[2 * t][g], rows[2 * t + 1][g]]
                else:
                    assert not trans
                    regs[L][j] = [rows[g][t]]
        return regs

    D = np.zeros((M, N))
    for w in range(num_warps):
        accw = {}
        for L in range(32):
            for r in range(cl.n_regs):
                accw[(L, r)] = Cin[cl.coord(r, L, w)]
        wa = warp_coord(w, lambda c: (c[0], 0))
        wb = warp_coord(w, lambda c: (0, c[1]))
        for k0 in range(0, K, kinstr):
            afr = {}
            for mi in range(mt_count):
                if kind == "tf32" and a_trans:
                    for L in range(32):
                        afr[(mi, L)] = [[sa[ta.offset(xor_coord(lane_coord(SCALAR_A_LANES, L), wa, (16 * mi, k0), scalar_a_reg(r)))]]
                                        for r in range(4)]
                else:
                    lanes = ldm_lanes_a(a_trans, kc)
                    addrs = [ta.offset(xor_coord(lane_coord(lanes, L), wa, (16 * mi, k0))) for L in range(32)]
                    regs = ldmatrix(sa, ta, addrs, 4, a_trans)
                    for L in range(32):
                        afr[(mi, L)] = regs[L]
            bfr = {}
            step = 2 if pair else 1
            for ni in range(0, nt_count, step):
                if kind == "tf32" and b_trans:
                    for L in range(32):
                        vals = []
                        for t in ((ni, ni + 1) if pair else (ni,)):
                            for r in range(2):
                                vals.append([sb[tb.offset(xor_coord(lane_coord(SCALAR_B_LANES, L), wb, (k0, 8 * t), scalar_b_reg(r)))]])
                        bfr[(ni, L)] = vals[0:2]
                        if pair:
                            bfr[(ni + 1, L)] = vals[2:4]
                else:
                    lanes = ldm_lanes_b(b_trans, kc, pair)
                    addrs = [tb.offset(xor_coord(lane_coord(lanes, L), wb, (k0, 8 * ni))) for L in range(32)]
                    regs = ldmatrix(sb, tb, addrs, 4 if pair else 2, b_trans)
                    for L in range(32):
                        bfr[(ni, L)] = regs[L][0:2]
                        if pair:
                            bfr[(ni + 1, L)] = regs[L][2:4]
            # mma.sync semantics from the fragment tables
            for mi in range(mt_count):
                for ni in range(nt_count):
                    Af = np.zeros((16, kinstr))
                    Bf = np.zeros((kinstr, 8))
                    for L in range(32):
                        g, t = L // 4, L % 4
                        ar, br = afr[(mi, L)], bfr[(ni, L)]
                        if es == 2:
                            for q in range(4):
                                rr, cc = g + 8 * (q & 1), 8 * (q >> 1) + 2 * t
                                Af[rr, cc], Af[rr, cc + 1] = ar[q]
                            for q in range(2):
                                Bf[8 * q + 2 * t, g], Bf[8 * q + 2 * t + 1, g] = br[q]
                        else:
                            for q in range(4):
                                Af[g + 8 * (q & 1), t + 4 * (q >> 1)] = ar[q][0]
                            for q in range(2):
                                Bf[t + 4 * q, g] = br[q][0]
                    Df = Af @ Bf
                    base = ((mi << log2(nt_count)) | ni) << 2
                    for L in range(32):
                        g, t = L // 4, L % 4
                        for e in range(4):
                            accw[(L, base + e)] += Df[g + 8 * (e >> 1), 2 * t + (e & 1)]
        for L in range(32):
            for r in range(cl.n_regs):
                D[cl.coord(r, L, w)] = accw[(L, r)]
    return D, conflicts


# ---- layout assignment: keep the epilogue in the accumulator layout ----------------------------------

_CHEAP = {"const", "splat", "arange", "broadcast", "expand_dims"}
_EPILOGUE = {"cast", "add", "sub", "mul", "fdiv", "maximum", "minimum", "maximum_nan", "minimum_nan",
             "cmp", "select", "neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "erf", "fma"}


def _cheap(v, depth: int = 4) -> bool:
    if not v.is_block:
        return True
    op = v.owner
    if op is None or depth == 0:
        return False
    if op.name in _CHEAP:
        return all(o is None or _cheap(o, depth - 1) for o in op.operands)
    return False


def forward_epilogue(assign, dot_op) -> None:
    """After a dot result is anchored to the MMA layout: give the same layout to the elementwise
    epilogue that consumes it (activation, `.to(fp16)` …) when its other operands are constants,
    so that the conversion to the store's coalesced layout happens once, on the narrowest type
    (Triton's RemoveLayoutConversions does the same). Called by LayoutAssignment._anchors."""
    from .. import ir
    lay = assign.layout.get(dot_op.result.id)
    if lay is None or mma_kind(dot_op) is None:
        return
    users = ir.uses(assign.fn)
    inside = {m.id for m in assign.links.group(dot_op.result)}
    work = list(assign.links.group(dot_op.result))
    while work:
        v = work.pop()
        for op in users.get(v.id, ()):
            if op.name not in _EPILOGUE or len(op.results) != 1:
                continue
            r = op.result
            if not r.is_block or r.shape != lay.shape or r.id in assign.layout:
                continue
            if not all(o is None or o.id in inside or _cheap(o) for o in op.operands):
                continue
            assign._set(r, lay)
            assign._drain()
            for m in assign.links.group(r):
                if m.id not in inside:
                    inside.add(m.id)
                    work.append(m)
