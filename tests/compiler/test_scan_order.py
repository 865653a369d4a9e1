"""The GPU scan lowering (backend/reduction.py `_scan`) run on a model of a CTA (simt_model): for
many layouts, sizes, warp counts, axes and both directions, every combine must see its operands in
scan order. The combine is the composition of affine maps modulo a prime — associative, not
commutative, and exact — so any operand swapped or any element combined twice or missed shows."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from compiler.backend import reduction
from compiler.backend.layouts import Layout, blocked, default_layout
from compiler.language import dtypes as T

from simt_model import CTA, Op, Val, Value

P = 2_147_483_647


def affine(first, then):
    """x -> a*x + b maps, `first` applied before `then` (the linear recurrence's combine)."""
    (a0, b0), (a1, b1) = first, then
    return (Val(a1.v * a0.v % P), Val((a1.v * b0.v + b1.v) % P))


def reference(a, b, axis, reverse):
    """Triton's definition: a reversed scan is the forward scan of the flipped block, flipped back."""
    a, b = np.moveaxis(a, axis, 0), np.moveaxis(b, axis, 0)
    ra, rb = np.empty_like(a), np.empty_like(b)
    acc = None
    for i in (range(a.shape[0] - 1, -1, -1) if reverse else range(a.shape[0])):
        cur = (a[i], b[i])
        acc = cur if acc is None else (cur[0] * acc[0] % P, (cur[0] * acc[1] + cur[1]) % P)
        ra[i], rb[i] = acc
    return np.moveaxis(ra, 0, axis), np.moveaxis(rb, 0, axis)


def run_scan(lay, num_warps, axis, reverse, seed=0):
    rng = np.random.default_rng(seed)
    a, b = (rng.integers(1, P, size=lay.shape, dtype=np.int64) for _ in range(2))
    cta = CTA(num_warps)
    xs = [Value(i, lay.shape, T.int32) for i in (0, 1)]
    outs = [Value(i, lay.shape, T.int32) for i in (2, 3)]
    cta.put(xs[0], lay, a)
    cta.put(xs[1], lay, b)
    reduction._scan(cta, Op(xs, outs, {"axis": axis, "reverse": reverse}), xs, affine)
    want_a, want_b = reference(a, b, axis, reverse)
    np.testing.assert_array_equal(cta.elements(outs[0]), want_a)
    np.testing.assert_array_equal(cta.elements(outs[1]), want_b)


def layouts_1d(n, num_warps):
    for vec in (1, 2, 4, 8):
        if vec <= n:
            yield blocked((n,), (0,), vec, num_warps)


def layouts_2d(shape, num_warps):
    yield default_layout(shape, num_warps)
    for order, vec in itertools.product(((1, 0), (0, 1)), (1, 4)):
        yield blocked(shape, order, vec, num_warps)
    yield blocked(shape, (1, 0), 1, num_warps, size_per_thread=(2, 2))
    yield blocked(shape, (0, 1), 1, num_warps, size_per_thread=(4, 2))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("num_warps", [1, 2, 4, 16])
@pytest.mark.parametrize("n", [1, 2, 16, 64, 256, 1024, 4096])
def test_scan_order_1d(n, num_warps, reverse):
    for lay in layouts_1d(n, num_warps):
        run_scan(lay, num_warps, 0, reverse, seed=n)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("num_warps", [1, 4, 16])
@pytest.mark.parametrize("shape", [(2, 64), (8, 8), (16, 128), (128, 4), (256, 16), (1024, 2)])
def test_scan_order_2d(shape, num_warps, axis, reverse):
    for lay in layouts_2d(shape, num_warps):
        run_scan(lay, num_warps, axis, reverse, seed=shape[0])


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("lay,axis", [
    # registers interleaved with lanes along the axis
    (Layout((128,), ((1,), (4,)), ((2,), (8,), (16,), (32,), (64,)), ()), 0),
    # a register basis across both dims (XOR swizzle)
    (Layout((2, 32), ((1, 1),), ((0, 1), (0, 2), (0, 4), (0, 8), (0, 16)), ()), 0),
    (Layout((2, 32), ((1, 1),), ((0, 1), (0, 2), (0, 4), (0, 8), (0, 16)), ()), 1),
])
def test_scan_order_of_layouts_the_rule_converts(lay, axis, reverse):
    """Layouts the rule cannot scan in place (it converts to a blocked one first)."""
    assert not reduction._scan_ok(lay, axis)
    run_scan(lay, lay.num_warps, axis, reverse)


def test_linear_recurrence_h100_case():
    """The failing H100 case (4096 elements, 4 warps, reversed): 8 register chunks above the warps,
    whose running total was composed the wrong way round from the third chunk on."""
    run_scan(blocked((4096,), (0,), 4, 4), 4, 0, True)
    run_scan(default_layout((4096,), 4), 4, 0, True)


class _ScanReached(Exception):
    pass


def compiled_scan_layout(monkeypatch, shape, axis, reverse, num_warps, aligned):
    """The layout the backend hands the scan rule when lowering the GPU test's kernel (`aligned`:
    the pointers are known to be 16-byte aligned, as for torch tensors at launch, which lets loads
    vectorize and so changes the layout). The lowering stops there: only the layout is wanted."""
    from compiler.backend.nvptx import lower_to_llvm
    from compiler.runtime.compile import build_ir
    from tests.compiler.kernels import shape_ops as SK

    def spy(lw, op, xs, comb):
        raise _ScanReached(lw.layout_of(xs[0]))
    monkeypatch.setattr(reduction, "_scan", spy)
    sig = dict(A="*fp32", B="*fp32", H="*fp32")
    if len(shape) == 1:
        kern, cx = SK.linear_recurrence_kernel, dict(N=shape[0], REVERSE=reverse)
    else:
        kern, cx = SK.linear_recurrence_2d_kernel, dict(M=shape[0], N=shape[1], AXIS=axis, REVERSE=reverse)
    fn = build_ir(kern, sig, cx, divisible_by_16=tuple(sig) if aligned else ())
    with pytest.raises(_ScanReached) as got:
        lower_to_llvm(fn, num_warps=num_warps, target="sm_90")
    monkeypatch.undo()
    return got.value.args[0]


def _gpu_cases():
    from tests.compiler.kernels import shape_ops as SK
    return [(n, nw, block) for n in SK.RECURRENCE_SIZES for nw in SK.RECURRENCE_WARPS
            for block in SK.recurrence_blocks(n)]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n,num_warps,block", _gpu_cases())
def test_scan_order_of_the_gpu_test_kernels(monkeypatch, n, num_warps, block, reverse):
    """Every case of test_shape_ops_gpu.py::test_linear_recurrence_order, in the layout the compiler
    really gives its scan, replayed on the model."""
    shape, axis = block
    for aligned in (False, True):
        lay = compiled_scan_layout(monkeypatch, shape, axis, reverse, num_warps, aligned)
        run_scan(lay, num_warps, axis, reverse, seed=n + num_warps)
