"""The GPU scan lowering (backend/reduction.py `_scan`) run on a model of a CTA (simt_model): for
many layouts, sizes, warp counts, axes and both directions, every combine must see its operands in
scan order. The combine is the composition of affine maps modulo a prime — associative, not
commutative, and exact — so any operand swapped or any element combined twice or missed shows."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from compiler.backend import reduction
from compiler.backend.layouts import blocked, default_layout
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
@pytest.mark.parametrize("num_warps", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("n", [1, 2, 16, 64, 256, 512, 2048, 4096, 8192])
def test_scan_order_1d(n, num_warps, reverse):
    for lay in layouts_1d(n, num_warps):
        run_scan(lay, num_warps, 0, reverse, seed=n)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("num_warps", [1, 4, 8, 16])
@pytest.mark.parametrize("shape", [(2, 64), (8, 8), (16, 128), (64, 32), (128, 4), (256, 16), (1024, 2)])
def test_scan_order_2d(shape, num_warps, axis, reverse):
    for lay in layouts_2d(shape, num_warps):
        run_scan(lay, num_warps, axis, reverse, seed=shape[0])


def test_linear_recurrence_h100_case():
    """The failing H100 case (4096 elements, 4 warps, reversed): 8 register chunks above the warps,
    whose running total was composed the wrong way round from the third chunk on."""
    run_scan(blocked((4096,), (0,), 4, 4), 4, 0, True)
    run_scan(default_layout((4096,), 4), 4, 0, True)
