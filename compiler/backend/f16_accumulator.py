"""fp16 accumulators: a `tl.dot` of fp16 operands whose result is fp16 (`out_dtype=tl.float16`, or an
fp16 `acc=`) accumulates in fp16 on the tensor cores, as Triton's does (its lowering takes the
accumulator type from the dot's result type): `mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16`
and `wgmma.mma_async ... .f16.f16.f16` instead of an fp32 accumulator rounded at the end. It is
faster (half the accumulator registers) and rounds each partial sum to fp16.

Both instructions hold such an accumulator in f16x2 registers, each the pair of elements that the
fp32 fragment keeps in two consecutive registers (columns 2t and 2t+1 of one row: the first register
bit of both accumulator layouts is (0, 1)), so the block keeps its layout and its one-value-a-element
registers; the pairs are packed into b32 words where an instruction or an inline asm takes them.
"""
from __future__ import annotations

from llvmlite import ir as ll

from .dot_layouts import mma_kind
from .llvm_types import F16, I32

H2 = ll.VectorType(F16, 2)


def accumulates_in_f16(op) -> bool:
    """The tensor-core dot `op` accumulates in fp16: fp16 operands and an fp16 result."""
    return mma_kind(op) == "f16" and op.result.dtype.name == "fp16"


def pack(b, halves: list, as_type=I32) -> list:
    """Consecutive pairs of fp16 values as f16x2 words (`as_type`: I32 for inline asm, H2 for the
    mma intrinsics)."""
    words = []
    for i in range(0, len(halves), 2):
        v = b.insert_element(ll.Constant(H2, None), halves[i], ll.Constant(I32, 0))
        v = b.insert_element(v, halves[i + 1], ll.Constant(I32, 1))
        words.append(v if as_type == H2 else b.bitcast(v, as_type))
    return words


def unpack(b, words: list) -> list:
    """The fp16 values of f16x2 words (b32 or <2 x half>), in order."""
    halves = []
    for w in words:
        v = w if w.type == H2 else b.bitcast(w, H2)
        halves += [b.extract_element(v, ll.Constant(I32, j)) for j in (0, 1)]
    return halves


def result_is_accumulator(op) -> bool:
    """The dot's result registers are its instruction's accumulator (fp32, int32, or fp16 here), not
    a conversion of it, and its `acc` has the same type: a wgmma may stay in flight on them."""
    res = op.result.dtype.name
    return (res in ("fp32", "int32") or accumulates_in_f16(op)) and op.operands[2].dtype == op.result.dtype
