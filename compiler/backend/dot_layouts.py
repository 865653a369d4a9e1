"""Tensor-core dots: which instruction a `tl.dot` lowers to, and the layouts that choice implies.

  mma_kind(op)          'f16' | 'bf16' | 'tf32' | 'tf32x3' | 'bf16x3' | 'bf16x6' | 'e4m3.e5m2' (fp8, A's
                        and B's kind) | 's8' (int8 → int32) when the dot can use tensor cores, else None (FMA)
  uses_wgmma(op, opts)  Hopper's warpgroup MMA (wgmma.py) rather than mma.sync (mma.py)
  acc_layout_for(op, opts)   the accumulator layout the layout assignment anchors the dot to
  SmemTile, operand_tiles    the swizzled shared-memory tiles both instructions read operands from

Layout math only (no LLVM): the layout assignment uses it before anything is lowered.

mma.sync's accumulator is the m16n8 fragment (PTX ISA, "Matrix fragments for mma.m16n8k16"), tiled
over the warps and repeated in registers. wgmma's: warps in groups of 4 (warpgroups) split M first
(64 rows each), then N; one instruction is m64 n(N / wg_n) k16, repeated over M / (64 wg_m) row blocks;
per instruction the m16n8 fragment repeated over n8 tiles (register order = the instruction's d0,
d1, …), the warps of a warpgroup at rows +16, +32.
"""
from __future__ import annotations

from .layouts import Layout, log2

KINDS = {"fp16": "f16", "bf16": "bf16"}
# fp8 operands (either kind for A and for B): the kind names both, "e4m3.e5m2", as PTX does
FP8_KINDS = {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}


def is_fp8_kind(kind) -> bool:
    return kind is not None and "." in kind


def is_8bit_kind(kind) -> bool:
    """fp8 and int8 operands: k32 per instruction, K-major tiles only (no transposed 8-bit wgmma,
    no 8-bit ldmatrix.trans)."""
    return is_fp8_kind(kind) or kind == "s8"


def is_int_kind(kind) -> bool:
    """An integer dot: int32 accumulators (b32 registers, not f32)."""
    return kind == "s8"


def mma_kind(op) -> str | None:
    """'f16' | 'bf16' | 'tf32' | 'tf32x3' | 'bf16x3' | 'bf16x6' | '<a>.<b>' (fp8: e4m3/e5m2, K ≥ 32) | 's8'
    (int8 × int8 → int32, K ≥ 32) when this dot can run on tensor cores, else None (FMA path)."""
    a, b, c = op.operands
    res = op.result
    adt = a.dtype.name
    m, n = res.shape
    k = a.shape[1]
    if min(m, n, k) < 16:
        return None
    if adt == "int8" and b.dtype.name == "int8" and res.dtype.name == "int32":
        return "s8" if k % 32 == 0 else None
    if res.dtype.name not in ("fp32", "fp16", "bf16"):
        return None
    if adt in FP8_KINDS and b.dtype.name in FP8_KINDS:
        return f"{FP8_KINDS[adt]}.{FP8_KINDS[b.dtype.name]}" if k % 32 == 0 else None
    if a.dtype.name != b.dtype.name:
        return None
    if adt in KINDS:
        return KINDS[adt]
    if adt == "fp32" and op.attrs.get("input_precision", "ieee") in ("tf32", "tf32x3", "bf16x3", "bf16x6"):
        return op.attrs["input_precision"]   # (the last three: split_precision.py)
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


def mma_acc_layout(m: int, n: int, num_warps: int) -> Layout:
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


def wgmma_config(m: int, n: int, num_warps: int):
    """(wg_m, wg_n, inst_n, m_reps) or None when wgmma does not fit this block."""
    if num_warps % 4 or num_warps < 4:
        return None
    wgs = num_warps // 4
    wg_m = 1
    while wg_m < wgs and m % (64 * wg_m * 2) == 0:
        wg_m *= 2
    wg_n = wgs // wg_m
    if m % (64 * wg_m) or n % wg_n:
        return None
    tn = n // wg_n
    if tn % 8 or not 8 <= tn <= 256:
        return None
    return wg_m, wg_n, tn, m // (64 * wg_m)


def wgmma_eligible(op, num_warps: int) -> bool:
    kind = mma_kind(op)
    if kind not in ("f16", "bf16") and not is_8bit_kind(kind):
        return False
    m, n = op.result.shape
    cfg = wgmma_config(m, n, num_warps)
    if cfg is not None and is_int_kind(kind):
        # the integer wgmma's N: 8, 16, 24, then multiples of 16 (PTX ISA, "wgmma.mma_async" shapes)
        return cfg[2] <= 24 or cfg[2] % 16 == 0
    return cfg is not None


def wgmma_acc_layout(m: int, n: int, num_warps: int) -> Layout:
    wg_m, wg_n, tn, reps = wgmma_config(m, n, num_warps)
    reg = [(0, 1), (8, 0)] + [(0, 8 << i) for i in range(log2(tn // 8))]
    reg += [((64 * wg_m) << i, 0) for i in range(log2(reps))]
    lane = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
    warp = [(16, 0), (32, 0)] + [(64 << i, 0) for i in range(log2(wg_m))] + [(0, tn << i) for i in range(log2(wg_n))]
    return Layout((m, n), tuple(reg), lane, tuple(warp))


def uses_wgmma(op, options) -> bool:
    """wgmma instead of mma.sync for this dot (sm_90 and knobs.codegen.wgmma not "off")."""
    return options.wgmma_target and wgmma_eligible(op, options.num_warps)


def acc_layout_for(op, options) -> Layout | None:
    """The layout assignment's anchor for a dot result (None: not a tensor-core dot)."""
    if mma_kind(op) is None:
        return None
    m, n = op.result.shape
    if uses_wgmma(op, options):
        return wgmma_acc_layout(m, n, options.num_warps)
    return mma_acc_layout(m, n, options.num_warps)


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

    def layout_offsets(self, lay: Layout) -> tuple:
        """(lane, warp, register) bases of `lay` as element offsets in this tile."""
        return (tuple(self.offset(c) for c in lay.lane), tuple(self.offset(c) for c in lay.warp),
                [self.offset(c) for c in lay.reg])

    def vector_width(self, reg_off: list, thread_mask: int) -> int:
        """Elements per access (≤ 16 bytes) of a layout whose register bits land at offsets
        `reg_off` and whose lanes/warps can set the bits of `thread_mask`: the leading registers
        that are consecutive in the tile, as long as nothing else touches those offset bits."""
        v, k = 1, 0
        while k < len(reg_off) and reg_off[k] == 1 << k and v * 2 <= self.vec:
            k += 1
            v *= 2
        while v > 1 and (thread_mask & (v - 1) or any(o & (v - 1) for o in reg_off[log2(v):])):
            v //= 2
        return v


def register_groups(reg_off: list, n_regs: int, v: int):
    """(first register, its constant offset: the XOR of its register bits' offsets) of each group
    of `v` consecutive registers."""
    for g in range(0, n_regs, v):
        c = 0
        for i, o in enumerate(reg_off):
            if g >> i & 1:
                c ^= o
        yield g, c


def contiguous_dim(lay: Layout) -> int:
    """The dim along which a thread's first registers (else its lanes) advance: the order the
    value came from memory in, so that writing it to shared memory vectorizes."""
    for group in (lay.reg, lay.lane):
        for b in group:
            nz = [d for d, x in enumerate(b) if x]
            if nz:
                return nz[0]
    return len(lay.shape) - 1


def operand_tiles(op, a_lay: Layout, b_lay: Layout, options, base: int = 0) -> tuple:
    """The swizzled shared-memory tiles of a dot's operands (A first, B 1024-byte aligned after it),
    each stored along the contiguous dim of the layout it arrives in."""
    a, bv = op.operands[0], op.operands[1]
    m, k = a.shape
    n = bv.shape[1]
    es = a.dtype.itemsize
    panels = uses_wgmma(op, options)
    ta = SmemTile((m, k), operand_cdim(op, 0, a_lay), es, base=base, panels=panels)
    tb = SmemTile((k, n), operand_cdim(op, 1, b_lay), es, base=base + (ta.nbytes + 1023) // 1024 * 1024, panels=panels)
    return ta, tb


def operand_cdim(op, i: int, lay: Layout) -> int:
    """The contiguous dim of operand i's tile: K for 8-bit operands (fp8, int8: no transposed wgmma,
    no 8-bit ldmatrix.trans), else the one its layout arrives in."""
    if is_8bit_kind(mma_kind(op)):
        return 1 - i
    return contiguous_dim(lay)


def tiles_end(ta: SmemTile, tb: SmemTile) -> int:
    return tb.base + tb.nbytes
