"""GPU runs of the front-end semantics kernels (returns in runtime ifs, conditional expressions with
effects, tl.topk) against torch (run by the lead on an H100:
`pytest -m gpu tests/compiler/test_frontend_semantics_gpu.py`).

Fresh random inputs every run (the seed is printed), outputs poisoned before the launch."""
from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from tests.compiler.kernels import frontend_semantics as K  # noqa: E402
from tests.compiler.kernels.gpu_util import DEV, gen, poisoned, rand  # noqa: E402,F401

pytestmark = pytest.mark.gpu


def _flag(v):
    return torch.tensor([int(v)], dtype=torch.int32, device=DEV)


@pytest.mark.parametrize("c1,c2,c3", list(itertools.product([False, True], repeat=3)))
def test_return_in_a_nested_runtime_if(c1, c2, c3):
    out = _flag(-1)
    K.nested_return_kernel[(1,)](_flag(c1), _flag(c2), _flag(c3), _flag(1), _flag(2), _flag(3), out)
    assert out.item() == ((1 if c2 else -1) if c1 else (2 if c3 else 3))


@pytest.mark.parametrize("dynamic", [False, True])
def test_return_under_a_compile_time_if(dynamic):
    out = _flag(-1)
    K.return_under_static_if_kernel[(1,)](_flag(1), out, DYNAMIC=dynamic)
    assert out.item() == (0 if dynamic else 1)
    K.return_under_static_if_kernel[(1,)](_flag(0), out, DYNAMIC=dynamic)
    assert out.item() == 1


def test_callee_returns_at_several_depths(gen):
    x = rand(gen, (16,), torch.int32, -10, 10)
    out = poisoned((16,), torch.int32)
    K.callee_returns_kernel[(1,)](x, out, N=16)
    assert torch.equal(out, torch.where(x < 5, torch.full_like(x, 5), x))


@pytest.mark.parametrize("flag", [0, 1])
def test_conditional_expression_runs_only_the_chosen_side(gen, flag):
    N = 128
    x = rand(gen, (N + 1,), torch.float32, -1.0, 1.0)
    out = poisoned((2 * N + 1,), torch.float32)
    count = torch.zeros(2, dtype=torch.int32, device=DEV)
    K.ifexp_effects_kernel[(1,)](_flag(flag), x, out, count, N=N)
    stored, other = (out[:N], out[N:2 * N]) if flag else (out[N:2 * N], out[:N])
    assert torch.equal(stored, x[:N]) and torch.isnan(other).all()
    assert out[2 * N].item() == (x[N].item() if flag else -1.0)
    assert count.tolist() == ([1, 0] if flag else [0, 1])


def test_loop_bounds_by_keyword():
    out = _flag(-1)
    K.static_range_kwargs_kernel[(1,)](out, N=100, STEP=7)
    assert out.item() == 2 * sum(range(0, 100, 7))


def test_uint8_with_a_python_int_stays_uint8(gen):
    x = rand(gen, (256,), torch.uint8, 0, 255)
    out = poisoned((256,), torch.uint8)
    K.uint_with_literal_kernel[(1,)](x, out, N=256)
    assert torch.equal(out, ((x.to(torch.int64) + 200) % 256 // 3).to(torch.uint8))


@pytest.mark.parametrize("M,N,k,nw", [(1, 8, 8, 1), (4, 64, 8, 4), (2, 512, 1, 8), (8, 16, 4, 4), (1, 1024, 16, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16, torch.bfloat16])
def test_topk(gen, M, N, k, nw, dtype):
    x = rand(gen, (M, N), dtype, -1000, 1000)
    z = poisoned((M, k), dtype)
    K.topk_kernel[(1,)](x, z, M=M, N=N, K=k, num_warps=nw)
    assert torch.equal(z, torch.topk(x, k).values)


def test_pointers_of_tl_pi32_t_are_selected_and_stored_as_integers(gen):
    a, b = rand(gen, (256,), torch.int64, 0, 2**40), rand(gen, (256,), torch.int64, 0, 2**40)
    cond = rand(gen, (256,), torch.int32, 0, 1).bool()
    out = poisoned((256,), torch.int64)
    K.where_pointers_kernel[(1,)](cond, a, b, out, N=256)
    assert torch.equal(out, torch.where(cond, a, b))


@pytest.mark.parametrize("fn,ref", [("j0", torch.special.bessel_j0), ("j1", torch.special.bessel_j1),
                                    ("y0", torch.special.bessel_y0), ("y1", torch.special.bessel_y1),
                                    ("cyl_bessel_i0", torch.special.i0), ("cyl_bessel_i1", torch.special.i1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_getattr_with_a_constexpr_name(gen, fn, ref, dtype):
    x = rand(gen, (128,), dtype, 0.1, 5.0)
    out = poisoned((128,), dtype)
    K.getattr_kernel[(1,)](x, out, FN=fn, N=128)
    torch.testing.assert_close(out, ref(x.double()).to(dtype))


def test_methods_of_a_number_make_it_a_scalar_tensor():
    out = torch.full((1,), -1, dtype=torch.int64, device=DEV)
    K.number_method_kernel[(1,)](out, START=2**35, N=20)
    assert out.item() == sum(range(2**35, 2**35 + 20))


def test_a_tuple_of_constexprs_holds_numbers():
    import compiler.language as tl
    out = _flag(-1)
    K.constexpr_tuple_kernel[(1,)](out, tuple(tl.constexpr(v) for v in (2, 3, 7)))
    assert out.item() == 42


def test_nested_hint_statements(gen):
    src = rand(gen, (2048,), torch.float32)
    dst = poisoned((2048,), torch.float32)
    off = torch.tensor([1024], dtype=torch.int32, device=DEV)
    K.nested_hints_kernel[(1,)](dst, src, off, 2048, BLOCK=1024, HINT=True)
    assert torch.equal(dst[1024:], src[1024:])


def test_aggregates_and_constexpr_functions(gen):
    x, y = rand(gen, (16,), torch.float32), rand(gen, (16,), torch.float32)
    out = poisoned((64,), torch.float32)
    K.aggregate_kernel[(1,)](x, y, out, N=16)
    # 3x + y is one fused multiply-add on the GPU (fp fusion, as Triton): rounded once
    torch.testing.assert_close(out[:16], (x.double() * 3 + y.double()).float(), rtol=1e-6, atol=1e-6)
    assert torch.equal(out[16:32], ((x + y) - x) - y)
    assert torch.equal(out[32:], torch.arange(32, dtype=torch.float32, device=out.device))


def test_dtype_annotations_type_scalar_parameters():
    out = torch.zeros(8, device=DEV)
    K.annotated_scalars_kernel[(1,)](out, 1.0009765625, 1, N=8)
    assert torch.equal(out.cpu(), torch.arange(8) + 2.0009765625)
    K.annotated_scalars_kernel[(1,)](out, 0.1, 300, N=8)         # fp16(0.1), uint8(300) = 44
    assert torch.equal(out.cpu(), torch.arange(8) + float(torch.tensor(0.1).half()) + 44)
