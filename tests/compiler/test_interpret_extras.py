"""Less common builtins and patterns, in interpret mode (see kernels/extras.py)."""
from __future__ import annotations

import numpy as np
import pytest
torch = pytest.importorskip("torch", reason="runs kernels over torch CPU tensors against torch (torch is not installed)")

from tests.compiler.kernels import extras as E
from tests.compiler.kernels.util import assert_close, gen, interpret, poisoned, rand  # noqa: F401

pytestmark = pytest.mark.usefixtures("interpret")


def test_scalar_loop_carried_from_python_float(gen):
    x = rand(gen, (5, 16), torch.float32, 0.1, 1)
    out = poisoned((2,), torch.float32)
    E.scalar_accumulate_kernel[(1,)](x, out, 5, N=16)
    assert_close(out[:1], x.sum().reshape(1))
    assert out[1].item() == x.max().item()


def test_max_return_indices(gen):
    x = torch.round(rand(gen, (8, 16), torch.float32, -3, 3))
    vals = poisoned((8,), torch.float32)
    idx = poisoned((8,), torch.int32)
    E.max_with_indices_kernel[(1,)](x, vals, idx, M=8, N=16)
    assert torch.equal(vals, x.max(1).values)
    assert idx.tolist() == [int(np.argmax(r)) for r in x.numpy()]


def test_keep_dims(gen):
    x = rand(gen, (4, 16), torch.float32)
    out = poisoned((4, 16), torch.float32)
    E.keep_dims_kernel[(1,)](x, out, M=4, N=16)
    assert_close(out, x - x.sum(1, keepdim=True))


def test_3d_reshape_broadcast_permute_ravel(gen):
    M, N = 8, 4
    x = rand(gen, (M * N,), torch.float32)
    out = poisoned((2 * N + M * N,), torch.float32)
    E.shapes_kernel[(1,)](x, out, M=M, N=N)
    assert_close(out[:2 * N].view(2, N), x.view(2, M // 2, N).sum(1) + torch.arange(N))
    assert torch.equal(out[2 * N:], x.view(M, N).T.reshape(-1))


def test_zeros_like_full_like(gen):
    x = rand(gen, (32,), torch.float16)
    out = poisoned((32,), torch.float16)
    E.like_kernel[(1,)](x, out, BLOCK=32)
    assert torch.equal(out, x * 2.5)


def test_misc_math(gen):
    B = 16
    x = rand(gen, (B,), torch.float32, 0.5, 1.5)
    i = rand(gen, (B,), torch.int32, -2**31, 2**31 - 1)
    out = poisoned((3 * B,), torch.float32)
    iout = poisoned((B + 2,), torch.int32)
    E.misc_math_kernel[(1,)](x, i, out, iout, BLOCK=B)
    assert_close(out[:B], torch.softmax(x, 0))
    torch.testing.assert_close(out[B:2 * B], torch.cumprod(x, 0), rtol=1e-5, atol=1e-6)
    assert_close(out[2 * B:], torch.exp(x) + torch.log(x.abs() + 1))
    # tl.umulhi is unsigned whatever the signedness (__nv_umulhi), as on the GPU
    hi = [((int(v) % 2**32) ** 2) >> 32 for v in i.tolist()]
    assert iout[:B].tolist() == [h - 2**32 if h >= 2**31 else h for h in hi]
    assert iout[B].item() == int(np.bitwise_xor.reduce(i.numpy()))
    assert iout[B + 1].item() == int(np.argmax(i.numpy()))


def test_keyword_args_tuple_swap_and_cache_hints(gen):
    x = rand(gen, (32,), torch.float32)
    out = poisoned((32,), torch.float32)
    E.kwargs_call_kernel[(1,)](x, out, BLOCK=32)
    assert_close(out, (x * 2) * 3 + 1.0 + x * 2 + 0.5)


def test_bitcast(gen):
    x = rand(gen, (32,), torch.float16)
    out = poisoned((32,), torch.int16)
    E.bitcast_kernel[(1,)](x, out, BLOCK=32)
    assert torch.equal(out, x.view(torch.int16))


def test_dot_variants(gen):
    M = N = 16
    K = 32      # the int8 dot's K: at least 32 on NVIDIA GPUs (Triton's min_dot_size), as it compiles there too
    a = rand(gen, (M, K), torch.float32)
    b = rand(gen, (K, N), torch.float32)
    ia = rand(gen, (M, K), torch.int8, -128, 127)
    ib = rand(gen, (K, N), torch.int8, -128, 127)
    c = poisoned((M, N), torch.float32)
    ci = poisoned((M, N), torch.int32)
    E.dot_variants_kernel[(1,)](a, b, c, ia, ib, ci, M=M, N=N, K=K)
    ref = a.double() @ b.double() + a.half().double() @ b.half().double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(ci, ia.int() @ ib.int())


@pytest.mark.parametrize("n,m", [(0, 5), (3, 5), (6, 2)])
def test_nested_loops(n, m):
    B = 8
    out = poisoned((B,), torch.int32)
    E.nested_loops_kernel[(1,)](out, n, m, BLOCK=B)
    acc = np.zeros(B, np.int64)
    for i in range(n):
        for j in range(i, m):
            acc += 1 if (i + j) % 3 == 0 else np.arange(B)
        acc -= 1
    assert out.tolist() == acc.tolist()


@pytest.mark.parametrize("flag", [-2, 3])
def test_where_scalar_condition(gen, flag):
    x = rand(gen, (16,), torch.float32)
    out = poisoned((32,), torch.float32)
    E.where_scalar_kernel[(1,)](x, out, flag, BLOCK=16)
    assert torch.equal(out[:16], x if flag > 0 else -x)
    assert torch.equal(out[16:], (x > 0).float())


@pytest.mark.parametrize("mode", [0, 1])
def test_constexpr_branch_in_runtime_loop(gen, mode):
    x = rand(gen, (4, 16), torch.float32)
    out = poisoned((16,), torch.float32)
    E.constexpr_in_loop_kernel[(1,)](x, out, 4, MODE=mode, BLOCK=16)
    assert_close(out, x.sum(0) if mode == 0 else torch.clamp(x.max(0).values, min=0))


def test_small_int_types(gen):
    B = 32
    a = rand(gen, (B,), torch.uint8, 0, 255)
    b = rand(gen, (B,), torch.int16, -1000, 1000)
    out = poisoned((5 * B,), torch.int16)
    E.int_types_kernel[(1,)](a, b, out, BLOCK=B)
    an = a.numpy().astype(np.int64)
    assert out[:B].tolist() == (an + b.numpy()).tolist()
    assert out[B:2 * B].tolist() == ((an * 2) % 256).tolist()
    assert out[2 * B:3 * B].tolist() == (a.numpy().astype(np.int8) >> 1).astype(np.int64).tolist()
    assert out[3 * B:4 * B].tolist() == (an >> 1).tolist()
    # Triton 3.6 (its interpreter prints uint8): kinds are bool < integer < float, so the int stays out
    # of the promotion and uint8 * 2 wraps at 8 bits
    assert out[4 * B:].tolist() == ((an * 2) % 256).tolist()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_chain_rounds_every_op(gen, dtype):
    n = 500
    x, y, z = (rand(gen, (n,), dtype, -8, 8) for _ in range(3))
    out = poisoned((n,), dtype)
    E.chain_kernel[(4,)](x, y, z, out, n, BLOCK=128)
    r = ((x * y) + z) - x  # torch rounds each op to fp16 / bf16 too
    r = torch.maximum(r, z) * 3.0 - y
    assert torch.equal(out, r)


def test_scalar_int_wraparound():
    out = torch.zeros(2, dtype=torch.int64)
    E.scalar_wrap_kernel[(1,)](out, 7, 40)
    v = w = 7
    for _ in range(40):
        v = (v * 3 + 1) % 2**32
        w = (w * 3 + 1) % 2**64
    assert out[0].item() == (v - 2**32 if v >= 2**31 else v)
    assert out[1].item() == (w - 2**64 if w >= 2**63 else w)
