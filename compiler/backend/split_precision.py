"""`tl.dot` of fp32 blocks with input_precision "tf32x3", "bf16x3" or "bf16x6": fp32 operands on the
tf32 or bf16 tensor cores, split into parts, with accuracy near fp32 — as Triton decomposes them
(F32DotTC; 3xTF32: NVIDIA/cutlass discussion 385; 3xBF16/6xBF16: arXiv 1904.06376):

    x0 = round(x)   x1 = round(x - x0)   x2 = round(x - x0 - x1)      (round: to tf32 or bf16)
    tf32x3, bf16x3: d = a1·b0 + a0·b1
    bf16x6:         d = a1·b1 + a2·b0 + a0·b2 + a1·b0 + a0·b1
    NaNs of d replaced by 0;  result = a0·b0 + d + c

each product an mma.sync accumulation into the last (mma.py), the small ones first so that they are
not lost against the big one; the NaN replacement keeps a finite a·∞ whose small part is 0 (0·∞ =
NaN) from turning the result into NaN. The operands' parts are written to swizzled tiles
(dot_layouts.SmemTile) between one pair of barriers.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..language import dtypes as T
from . import mma
from .dot_layouts import SmemTile, mma_acc_layout, operand_cdim
from .llvm_types import F32, I32, lty
from .smem_tiles import write_tile

# kind → (the parts' tensor-core kind, parts an operand is split into, the small products (part of A,
# part of B) in the order they accumulate)
SPLITS = {
    "tf32x3": ("tf32", 2, ((1, 0), (0, 1))),
    "bf16x3": ("bf16", 2, ((1, 0), (0, 1))),
    "bf16x6": ("bf16", 3, ((1, 1), (2, 0), (0, 2), (1, 0), (0, 1))),
}


def is_split_kind(kind) -> bool:
    return kind in SPLITS


def _round(lw, part_kind: str, x):
    """(the part as the tile holds it, its value as fp32)."""
    b = lw.b
    if part_kind == "tf32":   # cvt.rna.tf32.f32: the b32 bits of the nearest tf32
        bits = lw.call("llvm.nvvm.f2tf32.rna", I32, [x])
        return bits, b.bitcast(bits, F32)
    h = b.fptrunc(x, lty(T.bfloat16))   # round to nearest even
    return h, b.fpext(h, F32)


def split(lw, part_kind: str, parts: int, regs) -> list:
    """The `parts` parts of each fp32 register: part i rounds what the parts before it left."""
    b = lw.b
    out = [[] for _ in range(parts)]
    for x in regs:
        for i in range(parts):
            p, v = _round(lw, part_kind, x)
            out[i].append(p)
            if i + 1 < parts:
                x = b.fsub(x, v)
    return out


def _tiles(op, i: int, lay, es: int, parts: int, base: int) -> tuple[list, int]:
    """`parts` tiles of operand i, from byte `base` on (1024-byte aligned), and the end."""
    x = op.operands[i]
    tiles = []
    for _ in range(parts):
        t = SmemTile(x.shape, operand_cdim(op, i, lay), es, base=base)
        tiles.append(t)
        base = (base + t.nbytes + 1023) // 1024 * 1024
    return tiles, base


def _nan_to_zero(b, x):
    return b.select(b.fcmp_unordered("uno", x, x), ll.Constant(F32, 0.0), x)


def lower_split_dot(lw, op, kind: str) -> None:
    part_kind, parts, small = SPLITS[kind]
    a, bv, c = op.operands
    res = op.result
    es, mt = (4, I32) if part_kind == "tf32" else (2, lty(T.bfloat16))
    lays = (lw.layout_of(a), lw.layout_of(bv))
    tiles_a, end = _tiles(op, 0, lays[0], es, parts, 0)
    tiles_b, end = _tiles(op, 1, lays[1], es, parts, end)
    lw.smem_bytes = max(lw.smem_bytes, end)
    regs = lw.block(a, lays[0]), lw.block(bv, lays[1])   # (conversions to these layouts use shared memory too)
    lw.barrier()
    for x, lay, tiles in zip(regs, lays, (tiles_a, tiles_b)):
        for vals, tile in zip(split(lw, part_kind, parts, x), tiles):
            write_tile(lw, vals, lay, tile, mt)
    lw.barrier()
    b = lw.b
    cl = mma_acc_layout(*res.shape, lw.num_warps)
    acc = [ll.Constant(F32, 0.0)] * cl.n_regs
    for i, j in small:
        acc = mma.accumulate(lw, op, part_kind, tiles_a[i], tiles_b[j], acc)
    acc = mma.accumulate(lw, op, part_kind, tiles_a[0], tiles_b[0], [_nan_to_zero(b, x) for x in acc])
    cs = [x if x.type == F32 else b.fpext(x, F32) for x in lw.block(c, cl)]
    out = [b.fadd(x, y) for x, y in zip(acc, cs)]
    if lty(res.dtype) != F32:
        out = [b.fptrunc(x, lty(res.dtype)) for x in out]
    lw.set_block(res, cl, out)
