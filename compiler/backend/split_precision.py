"""`tl.dot(..., input_precision="tf32x3")`: fp32 operands on the tf32 tensor cores with about fp32
accuracy (the 3xTF32 trick, NVIDIA/cutlass discussion 385), as Triton decomposes it (F32DotTC):

    a_big = tf32(a)   a_small = tf32(a - a_big)        likewise b
    d = mma(a_small, b_big, 0) + mma(a_big, b_small)   NaNs of d replaced by 0
    result = mma(a_big, b_big, d) + c

The small products go first so that they are not lost against the big one; the NaN replacement
keeps a finite a·∞ whose small part is 0 (0·∞ = NaN) from turning the result into NaN. The four
operand parts are written to four swizzled tiles (dot_layouts.SmemTile) between one pair of
barriers and read by mma.py's tf32 mma.sync (m16n8k8) accumulation.
"""
from __future__ import annotations

from llvmlite import ir as ll

from . import mma
from .dot_layouts import mma_acc_layout, operand_tiles, tiles_end
from .llvm_types import F32, I32, lty
from .smem_tiles import write_tile


def _tf32(lw, x):
    """The tf32 value nearest to fp32 `x` (cvt.rna.tf32.f32), as its b32 bits."""
    return lw.call("llvm.nvvm.f2tf32.rna", I32, [x])


def split(lw, regs) -> tuple[list, list]:
    """(big, small) tf32 bits of each fp32 register: big = tf32(x), small = tf32(x - big)."""
    b = lw.b
    big = [_tf32(lw, x) for x in regs]
    small = [_tf32(lw, b.fsub(x, b.bitcast(h, F32))) for x, h in zip(regs, big)]
    return big, small


def _nan_to_zero(b, x):
    return b.select(b.fcmp_unordered("uno", x, x), ll.Constant(F32, 0.0), x)


def lower_tf32x3_dot(lw, op) -> None:
    a, bv, c = op.operands
    res = op.result
    a_lay, b_lay = lw.layout_of(a), lw.layout_of(bv)
    big_a, big_b = operand_tiles(op, a_lay, b_lay, lw.options)
    small_a, small_b = operand_tiles(op, a_lay, b_lay, lw.options, base=(tiles_end(big_a, big_b) + 1023) // 1024 * 1024)
    lw.smem_bytes = max(lw.smem_bytes, tiles_end(small_a, small_b))
    regs = lw.block(a, a_lay), lw.block(bv, b_lay)   # (conversions to these layouts use shared memory too)
    lw.barrier()
    for x, lay, big, small in zip(regs, (a_lay, b_lay), (big_a, big_b), (small_a, small_b)):
        hi, lo = split(lw, x)
        write_tile(lw, hi, lay, big, I32)
        write_tile(lw, lo, lay, small, I32)
    lw.barrier()
    b = lw.b
    cl = mma_acc_layout(*res.shape, lw.num_warps)
    acc = [ll.Constant(F32, 0.0)] * cl.n_regs
    acc = mma.accumulate(lw, op, "tf32", small_a, big_b, acc)
    acc = mma.accumulate(lw, op, "tf32", big_a, small_b, acc)
    acc = mma.accumulate(lw, op, "tf32", big_a, big_b, [_nan_to_zero(b, x) for x in acc])
    cs = [x if x.type == F32 else b.fpext(x, F32) for x in lw.block(c, cl)]
    out = [b.fadd(x, y) for x, y in zip(acc, cs)]
    if lty(res.dtype) != F32:
        out = [b.fptrunc(x, lty(res.dtype)) for x in out]
    lw.set_block(res, cl, out)
