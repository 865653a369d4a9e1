"""LLVM types of the NVPTX lowering (llvmlite) and how block-IR element types map onto them.

    lty(dt)   the register type of an element type (pointers: `ptr addrspace(1)`; i1: i1)
    mty(dt)   its in-memory type (bools are bytes)
    esize(dt) its size in bytes
"""
from __future__ import annotations

import struct

from llvmlite import ir as ll
from llvmlite.ir import types as _lltypes

from .errors import BackendError


class BFloatType(_lltypes._BaseFloatType):
    """LLVM `bfloat` (llvmlite 0.50 has no class for it)."""
    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self):
        return "bfloat"

    def format_constant(self, value):
        bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:
            return "0xR7FC0"
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return f"0xR{bits & 0xFFFF:04X}"


BFloatType._create_instance()

I1, I8, I16, I32, I64 = (ll.IntType(n) for n in (1, 8, 16, 32, 64))
F16, BF16, F32, F64 = ll.HalfType(), BFloatType(), ll.FloatType(), ll.DoubleType()
GPTR = ll.PointerType(addrspace=1)
SPTR = ll.PointerType(addrspace=3)
# Triton compiles with FP contraction on (enable_fp_fusion): a*b+c may become one fma.
CONTRACT = ("contract",)
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
FULL_MASK = ll.Constant(I32, -1)


def lty(dt) -> ll.Type:
    """Register type of an element type."""
    if dt.is_ptr():
        return GPTR
    n = dt.name
    if n == "int1":
        return I1
    if dt.is_int():
        return ll.IntType(dt.primitive_bitwidth)
    if n == "fp16":
        return F16
    if n == "bf16":
        if BF16 is None:
            raise BackendError("llvmlite lacks bfloat")
        return BF16
    if n == "fp32":
        return F32
    if n == "fp64":
        return F64
    if n in ("fp8e4nv", "fp8e5", "fp8e4b15"):
        return I8  # the bits (backend/fp8.py converts them; fp8e4b15's are integer ops)
    raise BackendError(f"element type {dt} is not supported by the NVPTX backend yet")


def mty(dt) -> ll.Type:
    """In-memory type (bools are bytes)."""
    return I8 if dt.name == "int1" else lty(dt)


def esize(dt) -> int:
    return 8 if dt.is_ptr() else max(1, dt.primitive_bitwidth // 8)


def is_signed(dt) -> bool:
    return dt.is_int_signed()


def fsuffix(dt) -> str:
    """The intrinsic-name suffix of a floating element type (`llvm.fma.f32`)."""
    return {"fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp64": "f64"}[dt.name]


def fsuffix_of(t: ll.Type) -> str:
    """The same for an LLVM floating type."""
    return {"half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64"}[str(t)]
