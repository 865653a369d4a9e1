"""Tuples in kernels, with Triton's semantics, in interpret mode against torch (CPU) references:
tuple arguments (nested; tensors, numbers, None and tl.constexpr leaves; torch.Size; NamedTuples),
tuples returned by @jit helpers, unpacking, constexpr indexing, len(), tl.tuple.

The GPU path of tuple arguments (leaves as kernel parameters, PTX through ptxas) is checked in
test_runtime.py::test_tuple_arguments_on_the_gpu_path.
"""
from __future__ import annotations

from typing import NamedTuple

import pytest
import torch

import compiler as triton
import compiler.language as tl
from tests.compiler.kernels.util import interpret  # noqa: F401


pytestmark = pytest.mark.usefixtures("interpret")


@triton.jit
def plus_one_each(values):
    return tl.tuple([v + 1 for v in values])


@triton.jit
def store_each(ptrs, values):
    for i in tl.static_range(len(values)):
        tl.store(ptrs[i], values[i])


@triton.jit
def increment_into(unused0, ptrs, unused1: tl.constexpr, values, unused2):
    store_each(ptrs, plus_one_each(values))


@pytest.mark.parametrize("size", [0, 1, 3, 5])
def test_tuples_of_pointers_and_of_numbers(size):
    values = tuple(float(2 * i + 1) for i in range(size))
    outs = tuple(torch.full((1,), float("nan")) for _ in values)
    increment_into[(1,)](7, outs, 0, values, 0)
    assert [o.item() for o in outs] == [v + 1 for v in values]


@triton.jit
def nested_kernel(out, maybe, pack, SCALE: tl.constexpr, offset, singles):
    tl.static_assert(maybe is None)
    tl.static_assert(pack[1][1] is None, "a None leaf stays None at compile time")
    tl.static_assert(pack[1][3] == 5, "a tl.constexpr leaf is a compile-time value")
    tl.store(out + 0, tl.load(pack[0]))
    tl.store(out + 1, pack[1][0])
    tl.store(out + 2, tl.load(pack[1][2]) * SCALE)
    tl.store(out + 3, offset + pack[1][3])
    tl.store(out + 4, tl.load(singles[0]) + len(pack[1]))


@pytest.mark.parametrize("int_leaf", [1, 9])     # 1 is specialized to a constant, as a plain int argument is
def test_nested_tuples_with_none_and_constexpr_leaves(int_leaf):
    a = torch.tensor([8], dtype=torch.int32)
    b = torch.tensor([12], dtype=torch.int32)
    c = torch.tensor([-3], dtype=torch.int32)
    out = torch.full((5,), -99, dtype=torch.int32)
    nested_kernel[(1,)](out, None, (a, (int_leaf, None, b, tl.constexpr(5))), 3, 20, (c,))
    assert out.tolist() == [8, int_leaf, 36, 25, 1]


class Strided(NamedTuple):
    ptr: object
    shape: tuple
    stride: tuple


@triton.jit
def masked_tile(t, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.arange(0, BM)[:, None]
    cols = tl.arange(0, BN)[None, :]
    return t.ptr + rows * t.stride[0] + cols * t.stride[1], (rows < t.shape[0]) & (cols < t.shape[1])


@triton.jit
def scale_tile(src, dst, factor, BM: tl.constexpr, BN: tl.constexpr):
    src_ptrs, src_mask = masked_tile(src, BM, BN)
    dst_ptrs, dst_mask = masked_tile(dst, BM, BN)
    tl.store(dst_ptrs, tl.load(src_ptrs, mask=src_mask, other=0.0) * factor, mask=dst_mask)


def test_namedtuple_arguments_keep_their_fields():
    x = torch.randn(12, 10)
    y = torch.full((6, 7), float("nan"))
    view = x[::2, 1:8]
    scale_tile[(1,)](Strided(view, view.shape, view.stride()), Strided(y, y.shape, y.stride()), 1.5, 8, 8)
    torch.testing.assert_close(y, view * 1.5, rtol=0, atol=0)


@triton.jit
def power_in_place(X, shape: tl.constexpr, strides, m_n):
    ptrs = X + tl.arange(0, shape[0])[:, None] * strides[0] + tl.arange(0, shape[1])[None, :] * strides[1]
    data = tl.load(ptrs)
    for _ in tl.range(0, m_n[1]):
        data = m_n[0] * data
    tl.store(ptrs, data)


def test_size_and_stride_tuples_constexpr_and_runtime():
    x = torch.arange(0, 32).reshape(4, 8)
    expected = x * 27
    power_in_place[(1,)](x, x.shape, x.stride(), (3, 3))
    assert torch.equal(x, expected)
    y = torch.arange(0, 32).reshape(8, 4).t()            # another stride tuple: another specialization
    expected_y = y * 4
    power_in_place[(1,)](y, y.shape, y.stride(), (2, 2))
    assert torch.equal(y, expected_y)


@triton.jit
def sum_diff_prod(a, b):
    return a + b, \
        a - b, \
        a * b


@triton.jit
def three_results(X, Y, OUT, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    y = tl.load(Y + offs)
    s, d, p = sum_diff_prod(x, y)
    both = sum_diff_prod(x, y)
    tl.static_assert(len(both) == 3)
    tl.store(OUT + offs, s)
    tl.store(OUT + BLOCK + offs, d)
    tl.store(OUT + 2 * BLOCK + offs, both[2])


def test_helpers_return_tuples_unpacked_or_indexed():
    x, y = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    out = torch.full((48,), float("nan"), dtype=torch.float64)
    three_results[(1,)](x, y, out, 16)
    torch.testing.assert_close(out, torch.cat([x + y, x - y, x * y]), rtol=0, atol=0)


@triton.jit
def tuple_values(out):
    tl.store(out + 0, (1, 2) == (1, 2))
    tl.store(out + 1, (1, 2) == (1, 1))
    tl.store(out + 2, tl.tuple((1, 2)) == (1, 2))
    joined = tl.tuple((4, 5)) + (6, 7)
    for i in tl.static_range(4):
        tl.store(out + 3 + i, joined[i])
    first, *rest = joined
    tl.store(out + 7, first * 10 + len(rest))


def test_tl_tuple_compares_and_concatenates():
    out = torch.full((8,), -1, dtype=torch.int32)
    tuple_values[(1,)](out)
    assert out.tolist() == [1, 0, 1, 4, 5, 6, 7, 43]


def test_assigning_into_a_tuple_is_a_compile_error():
    @triton.jit
    def set_item(out):
        t = tl.tuple([5, 6, 7])
        t[0] = 0
        tl.store(out, t[0])

    with pytest.raises(triton.CompilationError, match="test_tuples.py"):
        set_item[(1,)](torch.zeros(1, dtype=torch.int32))


def test_indexing_a_tuple_argument_with_a_runtime_value_is_a_compile_error():
    @triton.jit
    def runtime_index(ptrs, i):
        tl.store(ptrs[i], 1.0)

    with pytest.raises(triton.CompilationError, match="compile-time integers"):
        runtime_index[(1,)]((torch.zeros(1), torch.zeros(1)), 5)


class Closure(NamedTuple):
    fn: tl.constexpr
    captured: tuple


@triton.jit
def times_loaded(x, factor_ptr, offset):
    return x * tl.load(factor_ptr) + offset


@triton.jit
def apply_closure(closure, X, Y, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(Y + offs, closure.fn(tl.load(X + offs), *closure.captured))


def test_a_jit_function_inside_a_tuple_argument_is_called():
    x = torch.randn(32, dtype=torch.float64)
    y = torch.full_like(x, float("nan"))
    factor = torch.tensor([5.25], dtype=torch.float64)
    apply_closure[(1,)](Closure(times_loaded, (factor, 0.5)), x, y, 32)
    torch.testing.assert_close(y, x * 5.25 + 0.5, rtol=1e-6, atol=1e-6)


@triton.jit
def tuple_truthiness(out):
    tl.static_assert(((3, 4) or (5, 6)) == (3, 4))
    tl.static_assert(((3, 4) and (5, 6)) == (5, 6))
    tl.static_assert(((1, 2) and () and (5, 6)) == ())
    tl.static_assert((() and tl.program_id(0)) == ())
    tl.store(out, len((() or (7, 8, 9))))


def test_and_or_on_tuples_return_the_deciding_tuple():
    out = torch.zeros(1, dtype=torch.int32)
    tuple_truthiness[(1,)](out)
    assert out.item() == 3


@triton.jit
def scale_through_descriptors(descs, BLOCK: tl.constexpr):
    src, dst = descs
    dst.store([0, 0], src.load([0, 0]) * 2)


def test_a_tuple_of_host_tensor_descriptors():
    from compiler.tools.tensor_descriptor import TensorDescriptor
    x = torch.randn(16, 32)
    y = torch.full_like(x, float("nan"))
    pair = (TensorDescriptor.from_tensor(x, [16, 32]), TensorDescriptor.from_tensor(y, [16, 32]))
    scale_through_descriptors[(1,)](pair, 16)
    torch.testing.assert_close(y, x * 2, rtol=0, atol=0)
