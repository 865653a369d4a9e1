"""GPU runs of the compile-time Python kernels (aggregates built and changed by Python methods,
static/class method factories, constexpr arithmetic, user builtins, disable_licm loops, the launch's
num_threads/num_warps) against torch. Run by the lead on an H100:
`pytest -m gpu tests/compiler/test_compile_time_python_gpu.py`.

Fresh random inputs every run (the seed is printed), outputs poisoned before the launch."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.compiler.kernels import compile_time_python as K  # noqa: E402
from tests.compiler.kernels.gpu_util import DEV, gen, poisoned, rand  # noqa: E402,F401

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [0, 1, 7])
def test_aggregate_changed_in_loops(gen, n):
    x = rand(gen, (8,), torch.int32, -50, 50)
    out = poisoned((16,), torch.int32)
    K.aggregate_for_kernel[(1,)](x, out, n, BLOCK=16)
    ref = torch.arange(16, device=DEV, dtype=torch.int64) + x[:n].to(torch.int64).sum()
    assert torch.equal(out, ref.to(torch.int32))
    out = poisoned((16,), torch.int32)
    K.aggregate_while_kernel[(1,)](x, out, n, BLOCK=16)
    ref = torch.arange(16, device=DEV, dtype=torch.int64)
    for i in range(n):
        ref = ref * 2 + x[i].to(torch.int64)
    assert torch.equal(out, ref.to(torch.int32))


def test_static_and_class_method_factories(gen):
    x = rand(gen, (32,), torch.float32)
    out = poisoned((64,), torch.float32)
    K.aggregate_factories_kernel[(1,)](x, out, BLOCK=32)
    assert torch.equal(out[:32], x * 3) and torch.equal(out[32:], x * 2)


def test_constexpr_arithmetic_and_user_builtins():
    out = poisoned((8,), torch.int32)
    K.constexpr_values_kernel[(1,)](out)
    assert out.tolist() == [4, 16, 16, 8, 10, 11, 12, 13]


@pytest.mark.parametrize("disable_licm", [False, True])
def test_disable_licm_loops_compute_the_same(gen, disable_licm):
    x = rand(gen, (10,), torch.int32, -9, 9).to(torch.float32)
    out = poisoned((2,), torch.float32)
    K.loop_options_kernel[(1,)](x, out, 7, DISABLE_LICM=disable_licm)
    assert out.tolist() == [float((x[:7] + x[0] * 3).sum()), float((x[:7] * x[0]).sum())]


@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_num_threads_and_num_warps(num_warps):
    out = poisoned((512,), torch.int32)
    K.launch_shape_kernel[(1,)](out, num_warps=num_warps)
    n = 32 * num_warps
    assert torch.equal(out[:n], torch.full((n,), num_warps, device=DEV, dtype=torch.int32))
    assert (out[n:] == -123456).all()


@pytest.mark.parametrize("n", [0, 3])
def test_a_method_changes_a_tuple_field_in_a_loop(gen, n):
    x = rand(gen, (16,), torch.int32, -100, 100)
    out = poisoned((32,), torch.int32)
    K.aggregate_tuple_loop_kernel[(1,)](x, out, n, BLOCK=16)
    a, b = x.to(torch.int64), torch.zeros_like(x, dtype=torch.int64)
    for i in range(n):
        a, b = b + i, a
    assert torch.equal(out, torch.cat([a, b]).to(torch.int32))


@pytest.mark.parametrize("where", ["then", "else", "both", "neither"])
@pytest.mark.parametrize("flag", [0, 1])
def test_an_aggregate_changed_in_a_runtime_if(where, flag):
    out = poisoned((8,), torch.int32)
    K.aggregate_if_kernel[(1,)](torch.tensor([flag], dtype=torch.int32, device=DEV), out, BLOCK=8, WHERE=where)
    r = torch.arange(8, dtype=torch.int32, device=DEV)
    ref = (r + 100 if flag and where in ("then", "both") else r * 3 if not flag and where in ("else", "both") else r) + r
    assert torch.equal(out, ref)
