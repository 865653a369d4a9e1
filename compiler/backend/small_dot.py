"""`tl.dot` with M or N under 16 on the tensor cores, padded as Triton's: mma.sync computes a [16, 8]
(or [M, 8], [16, N]) accumulator of which the dot's [M, N] block is a corner — the instruction
Triton's test_dot looks for in these cases.

A goes into a [Pm, K] shared-memory tile and B into a [K, Pn] one; the rows of A past M and the
columns of B past N are whatever shared memory held, which reaches only the accumulator's rows past M
and columns past N (each accumulator element is the dot of one row of A and one column of B), and
those are dropped. The accumulator comes in and goes out through a row-major [Pm, Pn] scratch
buffer. fp8 operands go as fp16 (exact), as Triton does for them; integer, fp64 and fp32 "ieee" dots
stay FMA dots (dot.lower_dot).
"""
from __future__ import annotations

from types import SimpleNamespace

from ..language import dtypes as T
from . import fp8, mma
from .dot_layouts import FP8_KINDS, KINDS, SmemTile, contiguous_dim, mma_acc_layout
from .layouts import Layout
from .llvm_types import F16, F32, I32, lty
from .smem_tiles import write_tile

_ALIGN = 1024


def padded_kind(op) -> str | None:
    """The mma.sync kind of a dot with M or N under 16 that runs padded, else None (an FMA dot)."""
    a, bv, _ = op.operands
    m, n = op.result.shape
    k = a.shape[1]
    if min(m, n) >= 16 or k < 16 or op.result.dtype.name not in ("fp32", "fp16", "bf16"):
        return None
    ad, bd = a.dtype.name, bv.dtype.name
    if ad in FP8_KINDS and bd in FP8_KINDS:
        return "f16"
    if ad != bd:
        return None
    if ad in KINDS:
        return KINDS[ad]
    if ad == "fp32" and op.attrs.get("input_precision") == "tf32":
        return "tf32"
    return None


def _within(lay: Layout, shape: tuple) -> Layout:
    """The same layout, its coordinates read in a larger block (row-major offsets of `shape`)."""
    return Layout(shape, lay.reg, lay.lane, lay.warp)


def _operand(lw, x, kind):
    """x's registers as the tile holds them: fp8 as fp16, fp32 as tf32 bits."""
    lay = lw.layout_of(x)
    regs = lw.block(x, lay)
    if x.dtype.is_fp8():
        regs = [fp8.to_f16(lw, r, x.dtype) for r in regs]
    if kind == "tf32":
        regs = [lw.call("llvm.nvvm.f2tf32.rna", I32, [r]) for r in regs]
    return lay, regs


def lower_padded_dot(lw, op, kind: str) -> None:
    a, bv, c = op.operands
    res = op.result
    m, n = res.shape
    k = a.shape[1]
    pm, pn = max(16, m), max(8, n)
    b = lw.b
    es = 4 if kind == "tf32" else 2
    mt = I32 if kind == "tf32" else (F16 if kind == "f16" else lty(T.bfloat16))
    a_lay, a_regs = _operand(lw, a, kind)
    b_lay, b_regs = _operand(lw, bv, kind)
    ta = SmemTile((pm, k), contiguous_dim(a_lay), es)
    tb = SmemTile((k, pn), contiguous_dim(b_lay), es, base=-(-ta.nbytes // _ALIGN) * _ALIGN)
    acc_lay = mma_acc_layout(pm, pn, lw.num_warps)
    f16_acc = kind == "f16" and res.dtype.name == "fp16"
    acc_t = F16 if f16_acc else F32
    acc_es = 2 if f16_acc else 4
    scratch = -(-(tb.base + tb.nbytes) // _ALIGN) * _ALIGN
    lw.smem_bytes = max(lw.smem_bytes, scratch + pm * pn * acc_es)
    lw.barrier()
    write_tile(lw, a_regs, _within(a_lay, (pm, k)), ta, mt)
    write_tile(lw, b_regs, _within(b_lay, (k, pn)), tb, mt)
    if isinstance(lw.vals[c.id], tuple):   # an accumulator block: into the padded fragment
        c_lay = lw.layout_of(c)
        cs = [x if x.type == acc_t else b.fpext(x, F32) for x in lw.block(c, c_lay)]
        lw.smem_write(cs, _within(c_lay, (pm, pn)), acc_t, acc_es, base_elems=scratch // acc_es)
        lw.barrier()
        acc = lw.smem_read(acc_lay, acc_t, acc_es, base_elems=scratch // acc_es)
    else:                                   # a scalar (tl.dot without acc: zeros)
        x = lw.scalar(c)
        acc = [x if x.type == acc_t else b.fpext(x, F32)] * acc_lay.n_regs
    lw.barrier()
    padded = SimpleNamespace(
        operands=[SimpleNamespace(shape=(pm, k), dtype=a.dtype), SimpleNamespace(shape=(k, pn), dtype=bv.dtype), c],
        result=SimpleNamespace(shape=(pm, pn), dtype=res.dtype), attrs=op.attrs)
    acc = mma.accumulate(lw, padded, kind, ta, tb, acc)
    lw.barrier()   # every warp done with the scratch's accumulator reads
    lw.smem_write(acc, _within(acc_lay, (pm, pn)), acc_t, acc_es, base_elems=scratch // acc_es)
    lw.barrier()
    want = lw.want(res)
    out = lw.smem_read(_within(want, (pm, pn)), acc_t, acc_es, base_elems=scratch // acc_es)
    if lty(res.dtype) != acc_t:
        out = [b.fptrunc(x, lty(res.dtype)) for x in out]
    lw.set_block(res, want, out)
