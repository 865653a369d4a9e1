"""int8 and split-precision fp32 `tl.dot` on the GPU (`pytest -m gpu`): int8 exactly against torch's
int64 matmul, tf32x3/bf16x3/bf16x6 against float64 with errors near fp32's (far below one tf32
product's). Fresh random inputs each run (seed printed), outputs poisoned before the launch.
PTX-side tests: test_dot_precisions.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import compiler as triton  # noqa: E402
from tests.compiler.kernels import dot_precisions as K  # noqa: E402
from tests.compiler.kernels.gpu_util import DEV, gen, poisoned, rand  # noqa: E402,F401
from tests.compiler.test_dot_precisions import INT8_SHAPES  # noqa: E402

pytestmark = pytest.mark.gpu


def operand(g, shape, dtype, col_major: bool, lo=-128, hi=127):
    """A [rows, cols] tensor, stored column-major when `col_major` (a transposed view)."""
    if col_major:
        return rand(g, shape[::-1], dtype, lo, hi).T
    return rand(g, shape, dtype, lo, hi)


def run_tile(a, b, c, prec, add_c=True, num_warps=4):
    M, Kd = a.shape
    N = b.shape[1]
    K.tile_dot_kernel[(1,)](a, a.stride(0), a.stride(1), b, b.stride(0), b.stride(1), c, c.stride(0), c.stride(1),
                            BM=M, BN=N, BK=Kd, PREC=prec, ADD_C=add_c, num_warps=num_warps)
    torch.cuda.synchronize()


@pytest.mark.parametrize("M,N,Kd,nw,inst_n", INT8_SHAPES)
@pytest.mark.parametrize("col_a,col_b", [(False, False), (True, False), (False, True), (True, True)])
def test_int8_tile_dot_is_exact(gen, M, N, Kd, nw, inst_n, col_a, col_b):
    a = operand(gen, (M, Kd), torch.int8, col_a)
    b = operand(gen, (Kd, N), torch.int8, col_b)
    c = rand(gen, (M, N), torch.int32, -(1 << 20), 1 << 20)
    want = a.long() @ b.long() + c.long()
    run_tile(a, b, c, "ieee", num_warps=nw)
    assert torch.equal(c.long(), want)


def test_int8_dot_without_accumulator(gen):
    a = operand(gen, (64, 64), torch.int8, False)
    b = operand(gen, (64, 64), torch.int8, True)
    c = poisoned((64, 64), torch.int32)
    run_tile(a, b, c, "ieee", add_c=False)
    assert torch.equal(c.long(), a.long() @ b.long())


@pytest.mark.parametrize("M,N,Kd,bm,bn,bk,nw", [(256, 256, 512, 128, 128, 64, 8), (200, 136, 320, 64, 64, 64, 4),
                                                (96, 80, 200, 32, 64, 64, 2), (128, 64, 96, 64, 64, 32, 4)])
@pytest.mark.parametrize("col_b", [True, False])
def test_int8_k_loop_is_exact(gen, M, N, Kd, bm, bn, bk, nw, col_b):
    """The pipelined int8 loop (B K-major: cp.async + wgmma in flight) and the register path."""
    a = operand(gen, (M, Kd), torch.int8, False)
    b = operand(gen, (Kd, N), torch.int8, col_b)
    c = poisoned((M, N), torch.int32)
    K.loop_dot_kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
        a, b, c, M, N, Kd, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=bm, BN=bn, BK=bk, PREC="ieee", num_warps=nw)
    torch.cuda.synchronize()
    assert torch.equal(c.long(), a.long() @ b.long())


def test_int8_accumulate_loop_is_exact(gen):
    """`acc += tl.dot(a, b)` (folded into the dot, pipelined with the int32 accumulator in flight)."""
    Kd = 1024
    a = operand(gen, (64, Kd), torch.int8, False)
    b = operand(gen, (Kd, 64), torch.int8, True)
    c = poisoned((64, 64), torch.int32)
    K.int8_accumulate_kernel[(1,)](a, b, c, Kd, a.stride(0), b.stride(1), BM=64, BN=64, BK=64)
    torch.cuda.synchronize()
    assert torch.equal(c.long(), a.long() @ b.long())


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


# the relative error each split precision must stay under: ~10x a numpy model of its parts (with
# exact accumulation), which fp32 accumulation on the GPU adds ~1e-7 to; one tf32 product: ~2.6e-4
TOLERANCE = {"tf32x3": 2e-6, "bf16x3": 4e-5, "bf16x6": 2e-6}


@pytest.mark.parametrize("prec", list(TOLERANCE))
@pytest.mark.parametrize("M,N,Kd,nw", [(16, 16, 16, 4), (32, 32, 32, 4), (64, 64, 64, 4), (64, 32, 128, 8)])
@pytest.mark.parametrize("col_a,col_b", [(False, False), (True, True)])
def test_split_precision_is_near_fp32(gen, prec, M, N, Kd, nw, col_a, col_b):
    a = operand(gen, (M, Kd), torch.float32, col_a, -1.0, 1.0)
    b = operand(gen, (Kd, N), torch.float32, col_b, -1.0, 1.0)
    c0 = rand(gen, (M, N), torch.float32)
    ref = a.double() @ b.double() + c0.double()
    out = {}
    for p in ("tf32", prec):
        c = c0.clone()
        run_tile(a, b, c, p, num_warps=nw)
        out[p] = rel_err(c, ref)
    assert out[prec] < TOLERANCE[prec], out
    assert out[prec] * 5 < out["tf32"], out


@pytest.mark.parametrize("prec", list(TOLERANCE))
def test_split_precision_infinite_operand_gives_infinity_not_nan(gen, prec):
    """a = 1 (its small parts 0) times b = +inf: the small products give 0·inf = NaN, which must not
    reach the result (Triton zeroes their NaNs before the big product)."""
    a = torch.ones((16, 16), device=DEV)
    b = rand(gen, (16, 16), torch.float32)
    b[3, 5] = float("inf")
    c = torch.zeros((16, 16), device=DEV)
    run_tile(a, b, c, prec)
    want = (a.double() @ b.double())
    assert torch.isinf(c[:, 5]).all() and (c[:, 5] > 0).all()
    keep = torch.ones(16, dtype=torch.bool)
    keep[5] = False
    torch.testing.assert_close(c[:, keep].double(), want[:, keep], rtol=4 * TOLERANCE[prec], atol=4 * TOLERANCE[prec])


@pytest.mark.parametrize("prec", list(TOLERANCE))
def test_split_precision_k_loop(gen, prec):
    M, N, Kd = 200, 136, 300
    a = rand(gen, (M, Kd), torch.float32)
    b = rand(gen, (Kd, N), torch.float32)
    c = poisoned((M, N), torch.float32)
    K.loop_dot_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](
        a, b, c, M, N, Kd, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=64, BN=64, BK=32, PREC=prec, num_warps=4)
    torch.cuda.synchronize()
    assert rel_err(c, a.double() @ b.double()) < TOLERANCE[prec]
