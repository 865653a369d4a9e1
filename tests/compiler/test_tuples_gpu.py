"""On the GPU (`pytest -m gpu`): tuple arguments and @autotune's hooks, against torch in float64.

Fresh random inputs each run (the seed is printed on failure), outputs poisoned with NaN. The
kernels are test_tuples.py's and test_autotuner_semantics.py's; there they run in interpret mode.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import compiler as triton  # noqa: E402
import test_tuples as T  # noqa: E402  (the kernels)
import test_autotuner_semantics as A  # noqa: E402
from test_gpu_codegen import gen  # noqa: E402,F401  (a fresh CUDA generator, its seed printed)

pytestmark = pytest.mark.gpu

DEV = "cuda"




@pytest.mark.parametrize("int_leaf", [1, 9])
def test_nested_tuple_arguments(int_leaf, gen):
    a, b, c = (torch.randint(-100, 100, (1,), generator=gen, device=DEV, dtype=torch.int32) for _ in range(3))
    out = torch.full((5,), -99, dtype=torch.int32, device=DEV)
    T.nested_kernel[(1,)](out, None, (a, (int_leaf, None, b, triton.language.constexpr(5))), 3, 20, (c,))
    expected = [a.item(), int_leaf, b.item() * 3, 25, c.item() + 4]
    assert out.tolist() == expected


def test_namedtuple_of_pointer_shape_and_strides(gen):
    x = torch.randn((40, 30), generator=gen, device=DEV, dtype=torch.float32)
    view = x[1::3, 2:25]
    y = torch.full((view.shape[0], view.shape[1]), float("nan"), device=DEV)
    T.scale_tile[(1,)](T.Strided(view, view.shape, view.stride()), T.Strided(y, y.shape, y.stride()), 0.75, 16, 32)
    # one fp32 multiply, rounded once, on either side: the same bits
    torch.testing.assert_close(y, view * 0.75, rtol=0, atol=0)


def test_tuple_of_pointers_and_numbers_relaunched_with_new_values(gen):
    for size in (1, 4):
        values = tuple(float(v) for v in torch.randn(size, generator=gen, device=DEV).tolist())
        outs = tuple(torch.full((1,), float("nan"), device=DEV) for _ in values)
        T.increment_into[(1,)](0, outs, 0, values, 0)
        got = [o.item() for o in outs]
        want = [torch.tensor(v, dtype=torch.float32).item() + 1 for v in values]
        assert got == pytest.approx(want, rel=1e-6)


def test_helpers_returning_tuples(gen):
    x = torch.randn(64, generator=gen, device=DEV, dtype=torch.float64)
    y = torch.randn(64, generator=gen, device=DEV, dtype=torch.float64)
    out = torch.full((192,), float("nan"), device=DEV, dtype=torch.float64)
    T.three_results[(1,)](x, y, out, 64)
    torch.testing.assert_close(out, torch.cat([x + y, x - y, x * y]), rtol=0, atol=0)


def test_a_jit_function_inside_a_tuple_argument(gen):
    x = torch.randn(32, generator=gen, device=DEV, dtype=torch.float32)
    y = torch.full_like(x, float("nan"))
    factor = torch.tensor([1.75], device=DEV)
    T.apply_closure[(1,)](T.Closure(T.times_loaded, (factor, -0.5)), x, y, 32)
    torch.testing.assert_close(y.double(), x.double() * 1.75 - 0.5, rtol=1e-6, atol=1e-6)


def test_autotune_restore_value_and_reset_to_zero_on_the_gpu():
    tuned = triton.autotune(A.configs_of(32, 128), key=["N"], restore_value=["src"])(A.increment_kernel)
    src = torch.zeros(4096, device=DEV)
    tuned[A.by_block(4096)](src, 4096)
    assert torch.equal(src, torch.ones_like(src)) and set(tuned.configs_timings) == set(A.configs_of(32, 128))
    zeroed = triton.autotune(A.configs_of(32, 128), key=["N"], reset_to_zero=["maybe"])(A.ones_kernel)
    dst = torch.full((4096,), 2.0, device=DEV)
    zeroed[A.by_block(4096)](None, dst, 4096)
    assert torch.equal(dst, torch.ones_like(dst))


def test_num_ctas_2_runs_each_program_as_one_cta():
    x = torch.zeros(4096, device=DEV)
    A.increment_kernel[(64,)](x, 4096, BLOCK_SIZE=64, num_ctas=2)
    A.increment_kernel[(64,)](x, 4096, BLOCK_SIZE=64, num_ctas=1)
    assert torch.equal(x, torch.full_like(x, 2.0))


def test_a_tuple_of_host_tensor_descriptors(gen):
    from compiler.tools.tensor_descriptor import TensorDescriptor
    x = torch.randn((16, 32), generator=gen, device=DEV)
    y = torch.full_like(x, float("nan"))
    pair = (TensorDescriptor.from_tensor(x, [16, 32]), TensorDescriptor.from_tensor(y, [16, 32]))
    T.scale_through_descriptors[(1,)](pair, 16)
    torch.testing.assert_close(y, x * 2, rtol=0, atol=0)
