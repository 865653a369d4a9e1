"""Compile-time checks and loops with Triton's semantics: tl.static_assert (a
CompileTimeAssertionFailure, a CompilationError at file:line:col), tl.static_print (prints once per
compilation), tl.static_range(start, end, step) as Python's range, Python's and/or on compile-time
values (the value itself, the rest unevaluated)."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as triton
import compiler.language as tl
from tests.compiler.kernels.util import interpret  # noqa: F401


pytestmark = pytest.mark.usefixtures("interpret")


@triton.jit
def needs_power_of_two(out, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK & (BLOCK - 1) == 0, "BLOCK must be a power of two")
    tl.static_print("compiling for BLOCK =", BLOCK)
    tl.store(out + tl.arange(0, BLOCK), tl.arange(0, BLOCK))


def test_static_assert_and_static_print(capsys):
    kernel = triton.JITFunction(needs_power_of_two.fn)  # empty caches: this test sees the compile
    out = np.zeros(16, np.int32)
    kernel[(1,)](out, 16)
    kernel[(1,)](out, 16)                              # same specialization: not compiled (nor printed) again
    assert capsys.readouterr().out == "compiling for BLOCK = 16\n"
    assert (out == np.arange(16)).all()
    with pytest.raises(triton.CompileTimeAssertionFailure) as e:
        kernel[(1,)](np.zeros(12, np.int32), 12)
    assert isinstance(e.value, triton.CompilationError)
    line = needs_power_of_two.fn.__code__.co_firstlineno + 2
    assert f"test_static_checks.py:{line}:5: error: static assertion failed: BLOCK must be a power of two" in str(e.value)
    assert "tl.static_assert(BLOCK & (BLOCK - 1) == 0" in str(e.value)


@triton.jit
def prints_its_blocks(x, out, BLOCK: tl.constexpr):
    v = tl.load(x + tl.arange(0, BLOCK))
    tl.static_print("", v, tl.sum(v, 0) * 2.0)
    tl.store(out + tl.arange(0, BLOCK), v)


def test_static_print_shows_a_block_as_triton_does(capsys):
    kernel = triton.JITFunction(prints_its_blocks.fn)
    kernel[(1,)](np.arange(128, dtype=np.int32), np.zeros(128, np.int32), 128)
    assert capsys.readouterr().out == " int32[constexpr[128]] fp32[]\n"


def test_static_assert_needs_a_compile_time_condition():
    @triton.jit
    def runtime_condition(x):
        tl.static_assert(tl.load(x) > 0)

    with pytest.raises(triton.CompilationError, match="compile-time condition"):
        runtime_condition[(1,)](np.ones(1, np.float32))


@triton.jit
def static_range_sum(out, START: tl.constexpr, END: tl.constexpr, STEP: tl.constexpr):
    acc = 0
    count = 0
    for i in tl.static_range(START, END, STEP):
        acc += i
        count += 1
    tl.store(out, acc)
    tl.store(out + 1, count)


@pytest.mark.parametrize("start,end,step", [(0, 10, 1), (1, 10, 3), (10, 0, -2), (5, 5, 1), (-3, 4, 2)])
def test_static_range_is_pythons_range(start, end, step):
    out = np.full(2, -99, np.int32)
    static_range_sum[(1,)](out, start, end, step)
    expected = list(range(start, end, step))
    assert out.tolist() == [sum(expected), len(expected)]


@triton.jit
def optional_scale(out, scale_ptr, HAS_SCALE: tl.constexpr):
    # `scale_ptr` is None without HAS_SCALE: the right operand must not be evaluated then
    scaled = HAS_SCALE and tl.load(scale_ptr) * 2
    fallback = (() or (5, 6))[1]
    tl.store(out, scaled + fallback)


def test_and_or_on_compile_time_values_short_circuit_like_python():
    out = np.zeros(1, np.float32)
    optional_scale[(1,)](out, np.array([1.5], np.float32), True)
    assert out[0] == 9.0
    optional_scale[(1,)](out, None, False)
    assert out[0] == 6.0
