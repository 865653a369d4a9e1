"""compiler.pointer_effects: which pointer arguments a kernel's IR writes and reads, traced through
address arithmetic, select, casts and loop-carried pointers; refused when a written pointer does
not come from the arguments."""
from __future__ import annotations

import pytest

from compiler.pointer_effects import Undetermined, pointer_effects
from compiler.runtime.compile import build_ir
from compiler.runtime.source import load_source

SRC = '''
import triton
import triton.language as tl

@triton.jit
def copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

@triton.jit
def scatter_inplace(x_ptr, idx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.load(idx_ptr + offs, mask=offs < n, other=0)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=offs < n) * 2, mask=offs < n)

@triton.jit
def total(x_ptr, sum_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(sum_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))

@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BK
        b_ptrs += BK * N
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc)

@triton.jit
def either(x_ptr, y_ptr, out_ptr, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    dst = tl.where(flag > 0, x_ptr, y_ptr)
    tl.store(dst + offs, tl.load(out_ptr + offs))

@triton.jit
def branchy(x_ptr, out_ptr, alt_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if n > 4:
        p = out_ptr
    else:
        p = alt_ptr
    i = 0
    while i < n:
        tl.store(p + offs + i * BLOCK, tl.load(x_ptr + offs))
        i += 1

@triton.jit
def through_int(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    addr = out_ptr.to(tl.int64) + 0
    tl.store(addr.to(tl.pointer_type(tl.float32)) + offs, tl.load(x_ptr + offs))

@triton.jit
def pointer_from_memory(table_ptr, x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    dst = tl.load(table_ptr)
    tl.store(dst + offs, tl.load(x_ptr + offs))
'''

KERNELS = load_source(SRC)


def effects(name: str, sig: dict, constexprs: dict):
    return pointer_effects(build_ir(KERNELS[name], sig, constexprs))


def test_plain_output_and_input():
    e = effects("copy", {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}, {"BLOCK": 16})
    assert e.stored == {"out_ptr"} and e.loaded == {"x_ptr"}


def test_read_and_written_through_loaded_offsets():
    e = effects("scatter_inplace", {"x_ptr": "*fp32", "idx_ptr": "*i32", "n": "i32"}, {"BLOCK": 16})
    assert e.stored == {"x_ptr"} and e.loaded == {"x_ptr", "idx_ptr"}   # idx_ptr only feeds offsets


def test_atomics_write_and_read():
    e = effects("total", {"x_ptr": "*fp32", "sum_ptr": "*fp32", "n": "i32"}, {"BLOCK": 16})
    assert e.stored == {"sum_ptr"} and e.loaded == {"x_ptr", "sum_ptr"}


def test_loop_carried_pointers():
    e = effects("matmul", {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32",
                           "K": "i32"}, {"BM": 16, "BN": 16, "BK": 16})
    assert e.stored == {"c_ptr"} and e.loaded == {"a_ptr", "b_ptr"}


def test_select_writes_either_pointer():
    e = effects("either", {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "flag": "i32"}, {"BLOCK": 16})
    assert e.stored == {"x_ptr", "y_ptr"} and e.loaded == {"out_ptr"}


def test_if_and_while_carry_pointers():
    e = effects("branchy", {"x_ptr": "*fp32", "out_ptr": "*fp32", "alt_ptr": "*fp32", "n": "i32"}, {"BLOCK": 16})
    assert e.stored == {"out_ptr", "alt_ptr"} and e.loaded == {"x_ptr"}


def test_pointer_cast_through_an_integer_keeps_its_origin():
    e = effects("through_int", {"x_ptr": "*fp32", "out_ptr": "*fp32"}, {"BLOCK": 16})
    assert e.stored == {"out_ptr"}


def test_a_pointer_read_from_memory_is_refused():
    with pytest.raises(Undetermined, match="not derived from the kernel's pointer arguments"):
        effects("pointer_from_memory", {"table_ptr": "**fp32", "x_ptr": "*fp32"}, {"BLOCK": 16})
