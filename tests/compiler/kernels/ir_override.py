"""Kernels for Triton's `ir_override` tests: a copy kernel, and the PTX / LLVM IR of a kernel with
the same parameters that multiplies by ten (the override that changes what the copy does)."""
from __future__ import annotations

import re

import compiler as triton
import compiler.language as tl

SIGNATURE = dict(dst="*fp32", src="*fp32", N="i32")


@triton.jit
def _kernel(dst, src, N, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(src + offsets, mask=offsets < N)
    tl.store(dst + offsets, x, mask=offsets < N)


@triton.jit
def times_ten(dst, src, N, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(src + offsets, mask=offsets < N)
    tl.store(dst + offsets, x * 10, mask=offsets < N)


def times_ten_stages(target="sm_90", num_warps=4):
    return triton.compile(times_ten, signature=SIGNATURE, constexprs=dict(BLOCK_SIZE=32), num_warps=num_warps,
                          target=target).asm


def as_tritons_ptx(ptx: str, entry="_kernel", threads=128) -> str:
    """The PTX as Triton's backend lays a kernel out: named `entry`, a trailing (unused) scratch
    pointer parameter after the kernel's own, and `.reqntid` for its block size."""
    ptx = ptx.replace("times_ten", entry)
    ptx = re.sub(r"(\.param \.u32 \w+_param_2)\n\)", rf"\1,\n\t.param .u64 .ptr .global .align 1 {entry}_param_3\n)", ptx)
    return re.sub(r"\.maxntid \d+", f".reqntid {threads}", ptx)
