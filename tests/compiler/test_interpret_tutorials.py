"""Triton tutorials 01 (vector add), 02 (fused softmax) and 05 (layer-norm forward) in interpret mode."""
from __future__ import annotations

import pytest
torch = pytest.importorskip("torch", reason="runs Triton's tutorials with their torch host code (torch is not installed)")

from tests.compiler.kernels import tutorials as T
from tests.compiler.kernels.util import assert_close, gen, interpret, poisoned, rand  # noqa: F401

pytestmark = pytest.mark.usefixtures("interpret")


@pytest.mark.parametrize("size,block", [(98432 // 16, 1024), (1000, 128), (1, 64)])
def test_01_vector_add(gen, size, block):
    x = torch.rand(size, generator=gen)
    y = torch.rand(size, generator=gen)
    output_triton = T.add(x, y, BLOCK_SIZE=block)
    assert torch.equal(output_triton, x + y)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_01_vector_add_half(gen, dtype):
    x = rand(gen, (3000,), dtype)
    y = rand(gen, (3000,), dtype)
    out = poisoned((3000,), dtype)
    T.add_kernel[(3,)](x, y, out, 3000, BLOCK_SIZE=1024)
    assert torch.equal(out, x + y)


@pytest.mark.parametrize("shape", [(37, 100), (64, 781), (5, 1), (3, 1024)])
def test_02_fused_softmax(gen, shape):
    x = torch.randn(*shape, generator=gen)
    y = T.softmax(x, num_programs=4)  # persistent programs: each strides over several rows
    torch.testing.assert_close(y, torch.softmax(x, axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(37, 100), (16, 781)])
def test_02_fused_softmax_one_row_per_program(gen, shape):
    x = torch.randn(*shape, generator=gen)
    y = T.softmax_v1(x)
    torch.testing.assert_close(y, torch.softmax(x, axis=1), rtol=1e-5, atol=1e-6)


def test_02_fused_softmax_strided_input(gen):
    x = torch.randn(20, 200, generator=gen)[:, :150]  # row stride 200, 150 columns
    y = T.softmax(x, num_programs=3)
    torch.testing.assert_close(y, torch.softmax(x, axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("M,N,dtype,block", [
    (37, 512, torch.float16, None), (16, 300, torch.float32, None), (8, 1000, torch.float32, 128),
    (10, 256, torch.bfloat16, 64),
])
def test_05_layer_norm_forward(gen, M, N, dtype, block):
    eps = 1e-5
    x_shape = (M, N)
    w_shape = (x_shape[-1], )
    weight = torch.rand(w_shape, dtype=dtype, generator=gen)
    bias = torch.rand(w_shape, dtype=dtype, generator=gen)
    x = -2.3 + 0.5 * torch.randn(x_shape, generator=gen).to(dtype)
    y_tri, mean, rstd = T.layer_norm_forward(x, w_shape, weight, bias, eps, block_size=block)
    y_ref = torch.nn.functional.layer_norm(x.float(), w_shape, weight.float(), bias.float(), eps)
    xf = x.float()
    torch.testing.assert_close(mean, xf.mean(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rstd, 1 / torch.sqrt(xf.var(1, unbiased=False) + eps), rtol=1e-4, atol=1e-4)
    assert y_tri.dtype == dtype
    assert_close(y_tri, y_ref.to(dtype))


@pytest.mark.parametrize("activation", ["", "leaky_relu"])
def test_03_matmul_autotuned(gen, activation):
    M, N, K = 96, 80, 72  # not multiples of the blocks: the % M / % N wrap and the K masks matter
    a = torch.randn((M, K), generator=gen).half()
    b = torch.randn((K, N), generator=gen).half()
    c = T.matmul(a, b, activation)
    ref = a.float() @ b.float()
    if activation == "leaky_relu":
        ref = torch.where(ref >= 0, ref, 0.01 * ref)
    torch.testing.assert_close(c.float(), ref.half().float(), rtol=2e-3, atol=2e-3)
