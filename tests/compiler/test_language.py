"""The Triton language in interpret mode: every feature through `kernel[grid](...)` against torch/numpy.

Inputs are random (fresh seed per test, printed), outputs are poisoned (NaN / sentinel) before the
launch, so an element the kernel forgot to write fails the comparison.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
torch = pytest.importorskip("torch", reason="runs the language over torch CPU tensors (bfloat16 included) against torch (torch is not installed)")

import compiler as triton
import compiler.language as tl
from tests.compiler.kernels import language as K
from tests.compiler.kernels.util import TORCH, assert_close, gen, interpret, is_poisoned, poisoned, rand  # noqa: F401

pytestmark = pytest.mark.usefixtures("interpret")

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
NUMERIC = FLOATS + [torch.int32]


# ---------------------------------------------------------------------------------------------
# @jit, constexpr, grids, host helpers

def test_host_helpers():
    assert triton.cdiv(10, 4) == 3 and triton.cdiv(8, 4) == 2 and triton.cdiv(0, 4) == 0
    assert [triton.next_power_of_2(n) for n in (0, 1, 2, 3, 5, 64, 65, 1000)] == [1, 1, 2, 4, 8, 64, 128, 1024]


@pytest.mark.parametrize("dtype", NUMERIC + [torch.float64, torch.int8, torch.int64])
def test_copy_grid_tuple(gen, dtype):
    n = 1000
    x = rand(gen, (n,), dtype, -100, 100)
    y = poisoned((n + 5,), dtype)
    K.copy_kernel[(triton.cdiv(n, 128),)](x, y, n, BLOCK=128)
    assert_close(y[:n], x)
    assert is_poisoned(y[n:])  # the mask kept the tail untouched


@pytest.mark.parametrize("block", [16, 64, 256])
def test_grid_callable_over_meta(gen, block):
    n = 777
    x = rand(gen, (n,), torch.float32)
    y = poisoned((n,), torch.float32)
    seen = []

    def grid(meta):
        seen.append(meta["BLOCK"])
        return (triton.cdiv(meta["n"], meta["BLOCK"]),)
    K.copy_kernel[grid](x, y, n, BLOCK=block)
    assert seen == [block]
    assert torch.equal(y, x)


def test_numpy_arrays(gen):
    n = 300
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    K.copy_kernel[(3,)](x, y, n, BLOCK=128)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("n", [1, 17, 300])
def test_do_not_specialize(gen, n):
    x = rand(gen, (n,), torch.float32)
    y = rand(gen, (n,), torch.float32)
    out = poisoned((n,), torch.float32)
    K.axpy_kernel[(triton.cdiv(n, 64),)](x, y, out, n, 1.5, BLOCK=64)
    assert_close(out, 1.5 * x + y)
    K.axpy_kernel[(triton.cdiv(n, 64),)](x, y, out, n, 1, BLOCK=64)  # alpha == 1 is not specialized either
    assert_close(out, x + y)


@pytest.mark.parametrize("dtype", FLOATS)
def test_jit_calls_jit(gen, dtype):
    n = 200
    x = rand(gen, (n,), dtype)
    y = rand(gen, (n,), dtype)
    outs = [poisoned((n,), dtype) for _ in range(4)]
    K.call_kernel[(4,)](x, y, *outs, n, 0.25, SCALE=3, BLOCK=64)
    xf, yf = x.float(), y.float()
    assert_close(outs[0], (xf * xf).to(dtype).float() * 3 + yf, dtype)
    assert torch.equal(outs[1], torch.minimum(x, y))
    assert torch.equal(outs[2], torch.maximum(x, y))
    assert_close(outs[3], torch.clamp(xf, min=0.25), dtype)
    K.call_kernel[(4,)](x, y, *outs, n, -1.0, SCALE=3, BLOCK=64)  # the callee's other return path
    assert torch.equal(outs[3], torch.zeros_like(x) * x)


# ---------------------------------------------------------------------------------------------
# elementwise operators

def _ref_binary(op, x, y):
    if op == "floordiv":  # C semantics: truncates toward zero
        return torch.div(x, y, rounding_mode="trunc")
    if op == "mod":  # C semantics: the sign of the dividend (fmod for floats)
        return torch.fmod(x, y)
    return {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "and": torch.bitwise_and,
            "or": torch.bitwise_or, "xor": torch.bitwise_xor, "shl": torch.bitwise_left_shift,
            "shr": torch.bitwise_right_shift, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
            "eq": torch.eq, "ne": torch.ne, "maximum": torch.maximum, "minimum": torch.minimum,
            "where": lambda a, b: torch.where(a > b, a, b * 2),
            "logical": lambda a, b: ((a > 0) & (b > 0)) | ((a < 0) ^ (b < 0))}[op](x, y)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "lt", "le", "gt", "ge", "eq", "ne", "maximum", "minimum",
                                "where", "logical"])
def test_binary_ops(gen, dtype, op):
    n = 300
    x = rand(gen, (n,), dtype, -50, 50)
    y = rand(gen, (n,), dtype, -50, 50)
    y[::7] = x[::7]  # some equal pairs for the comparisons
    cmp = op in ("lt", "le", "gt", "ge", "eq", "ne", "logical")
    out = poisoned((n,), torch.bool if cmp else dtype)
    K.binary_kernel[(triton.cdiv(n, 128),)](x, y, out, n, OP=op, BLOCK=128)
    # one correctly rounded operation per element, as torch does: results must be bit-identical
    assert torch.equal(out, _ref_binary(op, x, y)), (out, _ref_binary(op, x, y))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.int64])
@pytest.mark.parametrize("op", ["floordiv", "mod", "and", "or", "xor"])
def test_integer_ops(gen, dtype, op):
    n = 256
    x = rand(gen, (n,), dtype, -100, 100)
    y = rand(gen, (n,), dtype, -9, 9)
    y[y == 0] = 3
    out = poisoned((n,), dtype)
    K.binary_kernel[(2,)](x, y, out, n, OP=op, BLOCK=128)
    assert_close(out, _ref_binary(op, x, y))


@pytest.mark.parametrize("op", ["shl", "shr"])
def test_shifts(gen, op):
    n = 128
    x = rand(gen, (n,), torch.int32, -2**20, 2**20)
    y = rand(gen, (n,), torch.int32, 0, 11)
    out = poisoned((n,), torch.int32)
    K.binary_kernel[(1,)](x, y, out, n, OP=op, BLOCK=128)
    assert_close(out, _ref_binary(op, x, y))
    # unsigned: logical right shift
    xu = np.random.default_rng().integers(0, 2**32, n, dtype=np.uint32)
    yu = np.random.default_rng().integers(0, 32, n, dtype=np.uint32)
    ou = np.zeros(n, np.uint32)
    K.binary_kernel[(1,)](xu, yu, ou, n, OP=op, BLOCK=128)
    np.testing.assert_array_equal(ou, (xu << yu) if op == "shl" else (xu >> yu))


def test_right_shift_signedness_follows_the_shifted_operand():
    """As in Triton, `int32 >> uint32` is computed in uint32 but shifts in sign bits (the left
    operand is signed); `uint32 >> int32` stays logical."""
    n = 128
    rng = np.random.default_rng()
    xs = rng.integers(-2**31, 2**31, n, dtype=np.int32)
    xs[:4] = [-1, -2**31, -12345, 7]
    yu = rng.integers(0, 32, n, dtype=np.uint32)
    out = np.zeros(n, np.uint32)
    K.binary_kernel[(1,)](xs, yu, out, n, OP="shr", BLOCK=128)
    np.testing.assert_array_equal(out, (xs >> yu.astype(np.int32)).view(np.uint32))
    xu = xs.view(np.uint32)
    ys = yu.astype(np.int32)
    K.binary_kernel[(1,)](xu, ys, out, n, OP="shr", BLOCK=128)
    np.testing.assert_array_equal(out, xu >> yu)


def test_mixed_signedness_right_shift_in_ptx():
    signature = {"x_ptr": "*i32", "y_ptr": "*u32", "out_ptr": "*u32", "n": "i32"}
    ptx = triton.compile(K.binary_kernel, signature=signature, constexprs={"OP": "shr", "BLOCK": 128},
                         num_warps=4, target="sm_90").asm["ptx"]
    assert re.search(r"\bshr\.s32\b", ptx) and not re.search(r"\bshr\.u32\b", ptx), ptx
    signature = {"x_ptr": "*u32", "y_ptr": "*i32", "out_ptr": "*u32", "n": "i32"}
    ptx = triton.compile(K.binary_kernel, signature=signature, constexprs={"OP": "shr", "BLOCK": 128},
                         num_warps=4, target="sm_90").asm["ptx"]
    assert re.search(r"\bshr\.[ub]32\b", ptx) and not re.search(r"\bshr\.s32\b", ptx), ptx


def test_int_wraparound(gen):
    n = 64
    x = torch.full((n,), 2**31 - 1, dtype=torch.int32)
    y = rand(gen, (n,), torch.int32, 1, 1000)
    out = poisoned((n,), torch.int32)
    K.binary_kernel[(1,)](x, y, out, n, OP="add", BLOCK=64)
    assert torch.equal(out, ((x.long() + y.long() + 2**31) % 2**32 - 2**31).int())
    K.binary_kernel[(1,)](x, y, out, n, OP="mul", BLOCK=64)
    assert torch.equal(out, ((x.long() * y.long() + 2**31) % 2**32 - 2**31).int())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["truediv", "fdiv", "mod"])
def test_float_division(gen, dtype, op):
    n = 200
    x = rand(gen, (n,), dtype, -10, 10)
    y = rand(gen, (n,), dtype, 0.5, 4) * torch.where(torch.arange(n) % 3 == 0, -1, 1).to(dtype)
    out = poisoned((n,), torch.float32)
    K.binary_kernel[(2,)](x, y, out, n, OP=op, BLOCK=128)
    xf, yf = x.float(), y.float()
    ref = torch.fmod(xf, yf) if op == "mod" else xf / yf
    # fp16 / fp16 and bf16 / bf16 compute in fp32 (Triton's rule), so the fp32 reference is exact
    if op == "mod":
        assert_close(out, ref, dtype)
    else:
        assert_close(out, ref, torch.float32)


UNARY_REF = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
             "log2": torch.log2, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid,
             "sin": torch.sin, "cos": torch.cos, "floor": torch.floor, "ceil": torch.ceil, "erf": torch.erf,
             "method_exp": torch.exp}


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
@pytest.mark.parametrize("op", list(UNARY_REF))
def test_unary_float(gen, dtype, op):
    n = 200
    positive = op in ("log", "log2", "sqrt", "rsqrt")
    x = rand(gen, (n,), dtype, 0.05 if positive else -4, 4)
    out = poisoned((n,), dtype)
    K.unary_kernel[(2,)](x, out, n, OP=op, BLOCK=128)
    ref = UNARY_REF[op](x.double()).to(dtype)  # correctly rounded reference
    assert_close(out, ref)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.int64])
@pytest.mark.parametrize("op", ["neg", "invert", "abs"])
def test_unary_int(gen, dtype, op):
    n = 100
    x = rand(gen, (n,), dtype, -100, 100)
    out = poisoned((n,), dtype)
    K.unary_kernel[(1,)](x, out, n, OP=op, BLOCK=128)
    assert torch.equal(out, {"neg": torch.neg, "invert": torch.bitwise_not, "abs": torch.abs}[op](x))


@pytest.mark.parametrize("dtype", FLOATS)
def test_fma_clamp(gen, dtype):
    n = 200
    x, y, z = (rand(gen, (n,), dtype, -3, 3) for _ in range(3))
    f, c = poisoned((n,), dtype), poisoned((n,), dtype)
    K.fma_clamp_kernel[(2,)](x, y, z, f, c, n, -1.5, 0.75, BLOCK=128)
    assert_close(f, (x.double() * y.double() + z.double()).to(dtype))
    assert torch.equal(c, torch.clamp(x, -1.5, 0.75))


# ---------------------------------------------------------------------------------------------
# promotion rules, casts

@pytest.mark.parametrize("xd,yd,op,xv,yv,out_dtype,expect", [
    # fp16 + fp32 -> fp32: 2**-20 survives only in fp32
    (torch.float16, torch.float32, "add", 1.0, 2**-20, torch.float32, 1 + 2**-20),
    # int32 + fp16 -> fp16: 2049 is not representable in fp16 (rounds to 2048)
    (torch.int32, torch.float16, "add", 2049, 0.0, torch.float32, 2048.0),
    # fp16 / fp16 -> fp32
    (torch.float16, torch.float16, "truediv", 1.0, 3.0, torch.float32, float(np.float32(1) / np.float32(3))),
    # python float * fp16 tensor -> fp16
    (torch.float16, torch.float16, "pymul", 1.0009765625, 0.0, torch.float32, float(np.float16(1.0009765625 ** 2))),
    # int8 + int32 -> int32 (no int8 wrap)
    (torch.int8, torch.int32, "add", 100, 100, torch.int64, 200),
    # int8 + python int stays int8 (wraps)
    (torch.int8, torch.int8, "pyadd_int", 100, 0, torch.int64, -56),
    # bf16 + fp16 -> fp16 (Triton checks fp16 before bf16): fp32 would keep the 2**-14, bf16 the 2**-10 neither
    (torch.bfloat16, torch.float16, "add", 1.0, 2**-10 + 2**-14, torch.float32, 1 + 2**-10),
    # bf16 + fp32 -> fp32
    (torch.bfloat16, torch.float32, "add", 1.0, 2**-20, torch.float32, 1 + 2**-20),
    # int32 + int64 -> int64
    (torch.int32, torch.int64, "add", 2**31 - 1, 1, torch.int64, 2**31),
    # fp32 + fp64 -> fp64
    (torch.float32, torch.float64, "add", 1.0, 2**-40, torch.float64, 1 + 2**-40),
])
def test_promotion(xd, yd, op, xv, yv, out_dtype, expect):
    x = torch.full((16,), xv, dtype=xd)
    y = torch.full((16,), yv, dtype=yd)
    out = poisoned((16,), out_dtype)
    K.promote_kernel[(1,)](x, y, out, OP=op, BLOCK=16)
    assert out.tolist() == [expect] * 16


def test_promotion_uint32_int32():
    # uint32 + int32 -> uint32: 0 - 1 wraps to 2**32 - 1 (an int32 result would be -1)
    x = np.zeros(16, np.uint32)
    y = np.ones(16, np.int32)
    out = np.zeros(16, np.int64)
    K.promote_kernel[(1,)](x, y, out, OP="sub", BLOCK=16)
    assert out.tolist() == [2**32 - 1] * 16


@pytest.mark.parametrize("xd,yd,expect", [
    (torch.float16, torch.float32, tl.float32), (torch.int32, torch.float16, tl.float16),
    (torch.int8, torch.int32, tl.int32), (torch.float16, torch.float16, tl.float16),
    (torch.bfloat16, torch.bfloat16, tl.bfloat16), (torch.int16, torch.int8, tl.int16),
    (torch.uint8, torch.int8, tl.uint8), (torch.bool, torch.int32, tl.int32), (torch.uint8, torch.int16, tl.int16),
])
def test_promotion_static_dtype(xd, yd, expect):
    x = torch.ones(16, dtype=xd)
    y = torch.ones(16, dtype=yd)
    out = poisoned((16,), torch.float32)
    K.promote_dtype_kernel[(1,)](x, y, out, EXPECT=expect, BLOCK=16)
    assert out.tolist() == [2.0] * 16


@pytest.mark.parametrize("src,dst", [
    (torch.float32, torch.float16), (torch.float32, torch.bfloat16), (torch.float16, torch.float32),
    (torch.bfloat16, torch.float32), (torch.float32, torch.int32), (torch.float16, torch.int16),
    (torch.int32, torch.float32), (torch.int32, torch.int8), (torch.int8, torch.int32), (torch.int32, torch.bool),
    (torch.float64, torch.float32), (torch.int64, torch.int32), (torch.float32, torch.int64),
    (torch.bfloat16, torch.float16), (torch.uint8, torch.int32), (torch.int32, torch.uint8),
])
def test_cast_to_element_ty(gen, src, dst):
    n = 150
    x = rand(gen, (n,), src, -300, 300) if src != torch.uint8 else rand(gen, (n,), src, 0, 255)
    if src.is_floating_point and dst in (torch.int8, torch.uint8):
        x = x.clamp(-100, 100)  # in range: out-of-range float -> int saturates (tested in test_cast_chain)
    out = poisoned((n,), dst)
    K.cast_kernel[(2,)](x, out, n, BLOCK=128)
    if dst == torch.bool:
        ref = x != 0
    elif src.is_floating_point and not dst.is_floating_point:
        ref = torch.trunc(x.double()).to(dst)
    elif not src.is_floating_point and not dst.is_floating_point:
        ref = torch.from_numpy(x.numpy().astype(out.numpy().dtype))  # two's complement wrap
    else:
        ref = x.to(dst)
    assert torch.equal(out, ref), f"{x}\n{out}\n{ref}"


def test_cast_chain(gen):
    B = 64
    x = rand(gen, (B,), torch.float32, -300, 300)
    x[:4] = torch.tensor([0.0, -0.5, 2.5, 1e-3])
    out = poisoned((11 * B,), torch.float32).view(11, B)
    K.cast_chain_kernel[(1,)](x, out, BLOCK=B)
    xn = x.numpy()
    t = torch.trunc(x)
    # float -> int conversions saturate at the target's range (PTX cvt.rzi clamps), int -> int wraps
    ref = [x.half().float(), x.bfloat16().float(), t, t.clamp(-128, 127), t.clamp(0, 255), (x > 0).float(), x,
           t.clamp(-2**15, 2**15 - 1), torch.from_numpy(t.numpy().astype(np.int32).astype(np.uint32)).float(),
           (x != 0).float(), torch.from_numpy(xn.view(np.int32).astype(np.float32))]
    for i, r in enumerate(ref):
        assert torch.equal(out[i], r), (i, out[i], r)


def test_store_casts_implicitly(gen):
    n = 128
    x = rand(gen, (n,), torch.float32, -100, 100)
    for dst in (torch.float16, torch.bfloat16, torch.int32, torch.float64):
        out = poisoned((n,), dst)
        K.copy_kernel[(1,)](x, out, n, BLOCK=128)
        ref = torch.trunc(x).to(dst) if not dst.is_floating_point else x.to(dst)
        assert torch.equal(out, ref), dst


# ---------------------------------------------------------------------------------------------
# program ids, shapes

def test_program_id_num_programs_3d():
    grid = (3, 4, 2)
    out = poisoned((2, 4, 3, 6), torch.int32)
    K.grid_kernel[grid](out)
    for z in range(2):
        for y in range(4):
            for x in range(3):
                assert out[z, y, x].tolist() == [x, y, z, 3, 4, 2]


def test_zeros_full_cdiv(gen):
    for n in (1, 13, 64):
        out = poisoned((64,), torch.int32)
        K.full_zeros_cdiv_kernel[(1,)](out, n, BLOCK=32)
        assert out[:32].tolist() == [14 + (n + 3) // 4] * 32
        assert out[32:].tolist() == [i * ((n + 31) // 32) for i in range(32)]


@pytest.mark.parametrize("dtype", FLOATS)
def test_broadcast_outer(gen, dtype):
    M, N = 37, 50
    x = rand(gen, (M,), dtype)
    y = rand(gen, (N,), dtype)
    out = poisoned((M, N + 3), dtype)
    K.outer_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 32))](x, y, out, M, N, out.stride(0), BM=16, BN=32)
    assert_close(out[:, :N], (x[:, None].float() * y[None, :].float()).to(dtype).float() + 1, dtype)
    assert torch.isnan(out[:, N:].float()).all()


@pytest.mark.parametrize("use_t", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_transpose(gen, use_t, dtype):
    M, N = 8, 32
    x = rand(gen, (M, N), dtype, -100, 100)
    out = poisoned((N, M), dtype)
    K.transpose_kernel[(1,)](x, out, M=M, N=N, USE_T=use_t)
    assert torch.equal(out, x.T)


def test_reshape(gen):
    M, N = 4, 16
    x = rand(gen, (M * N,), torch.float32)
    out = poisoned((M + M * N,), torch.float32)
    K.reshape_kernel[(1,)](x, out, M=M, N=N)
    assert_close(out[:M], x.view(M, N).sum(1))
    assert torch.equal(out[M:], x * 2)


# ---------------------------------------------------------------------------------------------
# reductions, scans

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax", "argmin"])
def test_reduce_1d(gen, dtype, op):
    rows, n = 6, 100
    x = rand(gen, (rows, n), dtype, -5, 5)
    out = poisoned((rows,), torch.int32 if op.startswith("arg") else dtype)
    K.reduce_1d_kernel[(rows,)](x, out, n, OP=op, BLOCK=128)
    if op == "sum":
        assert_close(out.float(), x.double().sum(1).float(), torch.float32 if dtype == torch.float32 else dtype)
    elif op in ("max", "min"):
        assert torch.equal(out, getattr(x, op)(1).values)
    else:
        ref = torch.tensor([int(np.argmax(r) if op == "argmax" else np.argmin(r)) for r in x.float().numpy()])
        assert torch.equal(out.long(), ref)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax", "argmin", "method_sum"])
def test_reduce_2d(gen, dtype, op, axis):
    M, N = 8, 32
    # few distinct values: many ties, so argmax/argmin must pick the first index
    x = rand(gen, (M, N), dtype, -4, 4)
    if dtype.is_floating_point:
        x = torch.round(x)
    keep = N if axis == 0 else M
    out = poisoned((keep,), torch.int32 if op.startswith("arg") else dtype)
    K.reduce_2d_kernel[(1,)](x, out, OP=op, AXIS=axis, M=M, N=N)
    xn = x.float().numpy() if dtype != torch.int32 else x.numpy()
    ref = {"sum": np.sum, "method_sum": np.sum, "max": np.max, "min": np.min, "argmax": np.argmax,
           "argmin": np.argmin}[op](xn, axis=axis)
    assert np.array_equal(out.float().numpy(), np.asarray(ref, dtype=np.float32)), (out, ref)


def test_reduce_all_axes(gen):
    x = rand(gen, (8, 16), torch.float32)
    out = poisoned((4,), torch.float32)
    K.reduce_all_kernel[(1,)](x, out, M=8, N=16)
    assert_close(out, torch.stack([x.sum(), x.max(), x.min(), x.sum()]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(gen, dtype, axis, reverse):
    M, N = 4, 16
    x = rand(gen, (M, N), dtype, -3, 3)
    if dtype == torch.float16:
        x = torch.round(x * 4) / 4  # quarter steps: every partial sum is exact in fp16, in any order
    out = poisoned((M, N), dtype)
    K.cumsum_kernel[(1,)](x, out, M=M, N=N, AXIS=axis, REVERSE=reverse)
    xr = x.double().flip(axis) if reverse else x.double()
    ref = xr.cumsum(axis)
    ref = ref.flip(axis) if reverse else ref
    if dtype == torch.float16:
        assert torch.equal(out.double(), ref)
    else:
        assert_close(out, ref.to(dtype))


def test_cumsum_int8_promotes(gen):
    x = torch.full((32,), 100, dtype=torch.int8)
    out = poisoned((32,), torch.int32)
    K.cumsum_1d_kernel[(1,)](x, out, BLOCK=32)
    assert out.tolist() == [100 * (i + 1) for i in range(32)]  # summed in int32, no int8 wrap


# ---------------------------------------------------------------------------------------------
# control flow

def test_static_range(gen):
    B = 32
    x = rand(gen, (3, B), torch.float32)
    out = poisoned((B,), torch.float32)
    K.static_range_kernel[(1,)](x, out, N_ITERS=3, BLOCK=B)
    assert_close(out, x[0] + 2 * x[1] + 3 * x[2] + 1 + 3)


@pytest.mark.parametrize("start,n_blocks", [(0, 5), (2, 5), (4, 2)])
def test_tl_range(gen, start, n_blocks):
    B = 16
    x = rand(gen, (5, B), torch.float32)
    out = poisoned((B + 1,), torch.float32)
    K.tl_range_kernel[(1,)](x, out, n_blocks, start, BLOCK=B)
    ref = x[start:n_blocks].sum(0) if start < n_blocks else torch.zeros(B)
    assert_close(out[:B], ref)
    assert out[B].item() == max(0, n_blocks - start)


@pytest.mark.parametrize("n,step", [(100, 32), (100, 7), (5, 32), (2, 3)])
def test_python_range_runtime_bounds(gen, n, step):
    B = 32
    x = rand(gen, (n,), torch.float32)
    out = poisoned((B + 2,), torch.float32)
    K.py_range_kernel[(1,)](x, out, n, step, BLOCK=B)
    acc = torch.zeros(B)
    for s in range(0, n, step):
        chunk = x[s:s + step]
        acc[:len(chunk)] += chunk
    assert_close(out[:B], acc)
    assert out[B].item() == x.max().item()
    down = 0
    for i in range(n - 1, -1, -1):
        down = (down * 2 + i % 2) & 0xFFFFFFFF
    assert out[B + 1].item() == float(np.float32(np.int32(np.uint32(down))))


@pytest.mark.parametrize("flag", [-1, 1, 2, 3])
def test_if_else_runtime(gen, flag):
    B = 16
    x = rand(gen, (B,), torch.float32)
    out = poisoned((B + 2,), torch.float32)
    thresh = 0.5
    K.if_else_kernel[(1,)](x, out, flag, thresh, BLOCK=B)
    y = x * 2 if flag > 0 else x - 1
    if flag == 2:
        y = y + 100
    assert_close(out[:B], y)
    s = x.sum().item()
    assert out[B].item() == (1 if s > thresh else -1 if s < -thresh else 0)
    assert out[B + 1].item() == (1 if (flag > 0 and s > 0) or not (flag != 3) else 0)


@pytest.mark.parametrize("n", [6, 7, 27])
def test_while(n):
    out = poisoned((9,), torch.int32)
    K.while_kernel[(1,)](out, n)
    steps, v = 0, n
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        steps += 1
    assert out[0].item() == steps
    assert out[1:].tolist() == [i * steps for i in range(8)]


def _cdiv_trunc(a, b):
    return int(a / b)


@pytest.mark.parametrize("a,b", [(7, 3), (-7, 3), (7, -3), (9, 9), (2, 5)])
def test_scalar_math(a, b):
    c0 = torch.tensor([11], dtype=torch.int32)
    out = poisoned((9,), torch.int32)
    K.scalar_math_kernel[(1,)](c0, out, a, b)
    ref = [min(a, b), max(a, b), _cdiv_trunc(a, b), int(math.fmod(a, b)), min(a, b, 3), _cdiv_trunc(-a, b),
           int(math.fmod(-a, b)), (11 + a) * 2, (a << 2) | 1]
    assert out.tolist() == ref


def test_early_return():
    n, B = 40, 16
    out = poisoned((80,), torch.int32)
    K.early_return_kernel[(5,)](out, n, BLOCK=B)
    assert out[:n].tolist() == list(range(n))
    assert is_poisoned(out[n:])


# ---------------------------------------------------------------------------------------------
# memory

@pytest.mark.parametrize("dtype", NUMERIC)
def test_load_mask_other(gen, dtype):
    B, n = 64, 37
    x = rand(gen, (n,), dtype, -50, 50)
    out = poisoned((2 * B,), dtype)
    K.masked_other_kernel[(1,)](x, out, n, -7, BLOCK=B)
    assert torch.equal(out[:n], x) and (out[n:B] == -7).all()
    offs = torch.arange(B)
    ref = torch.where((offs % 2 == 0) & (offs < n), torch.cat([x, torch.zeros(B - n, dtype=dtype)]),
                      (-offs.float()).to(dtype))
    assert torch.equal(out[B:], ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16])
def test_scalar_pointer_load_store(gen, dtype):
    n = 20
    x = rand(gen, (n,), dtype, -10, 10)
    out = poisoned((3,), dtype)
    K.scalar_ptr_kernel[(1,)](x, out, n)
    ref_sum = x[0]
    for i in range(1, n):
        ref_sum = ref_sum + x[i]  # accumulated in the element type, like the kernel
    assert_close(out[0:1], ref_sum.reshape(1))
    assert out[1].item() == x[n - 1].item()
    assert is_poisoned(out[2:])


def test_hints_and_barrier(gen):
    n = 500
    x = rand(gen, (n,), torch.float32)
    out = poisoned((n,), torch.float32)
    K.hints_kernel[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64)
    assert torch.equal(out, x + 1)


def test_atomic_add_histogram(gen):
    n, nbins = 3000, 16
    x = rand(gen, (n,), torch.int32, 0, 1000)
    hist = torch.zeros(nbins, dtype=torch.int32)
    K.histogram_kernel[(triton.cdiv(n, 256),)](x, hist, n, NBINS=nbins, BLOCK=256)
    assert torch.equal(hist, torch.bincount(x % nbins, minlength=nbins).int())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
@pytest.mark.parametrize("op", ["add", "max", "min", "xchg"])
def test_atomic_rmw_masked(gen, dtype, op):
    B, n = 32, 20
    mem = rand(gen, (B,), dtype, -100, 100)
    start = mem.clone()
    v = rand(gen, (B,), dtype, -100, 100)
    old = poisoned((B,), dtype)
    K.atomic_kernel[(1,)](mem, v, old, n, OP=op, BLOCK=B)
    f = {"add": torch.add, "max": torch.maximum, "min": torch.minimum, "xchg": lambda a, b: b}[op]
    assert torch.equal(mem[:n], f(start[:n], v[:n]))
    assert torch.equal(mem[n:], start[n:])  # masked lanes untouched
    assert torch.equal(old[:n], start[:n])  # atomics return the old values
    assert is_poisoned(old[n:])


def test_atomics_on_scalar_pointers(gen):
    progs, B = 50, 16
    x = rand(gen, (progs, B), torch.float32)
    counter = torch.zeros(1, dtype=torch.int32)
    slots = poisoned((progs,), torch.int32)
    total = torch.tensor([0.0, -float("inf"), float("inf")])
    K.atomic_scalar_kernel[(progs,)](counter, slots, total, x, BLOCK=B)
    assert counter.item() == progs
    assert sorted(slots.tolist()) == list(range(progs))  # every ticket taken exactly once
    assert_close(total[:1], x.sum().reshape(1).float())
    assert total[1].item() == x.max().item() and total[2].item() == x.min().item()


@pytest.mark.timeout(10)  # a spin lock: a wrong while-loop lowering hangs here
def test_atomic_cas_spin_lock():
    progs = 6
    lock = torch.zeros(1, dtype=torch.int32)
    count = torch.zeros(1, dtype=torch.int32)
    data = poisoned((progs,), torch.int32)
    K.spin_lock_kernel[(progs,)](lock, count, data)
    assert lock.item() == 0 and count.item() == progs
    assert sorted(data.tolist()) == list(range(progs))


def test_atomic_cas(gen):
    progs, B = 6, 8
    cas = rand(gen, (B,), torch.int32, 0, progs)
    start = cas.clone()
    cas_old = poisoned((progs, B), torch.int32)
    flag = torch.full((1,), -1, dtype=torch.int32)
    K.atomic_cas_kernel[(progs,)](cas, cas_old, flag, BLOCK=B)
    # programs run one after the other (in pid order in the interpreter); each swaps the lanes
    # holding its pid to pid + 1 and gets the old values back
    mem = start.clone()
    for p in range(progs):
        assert torch.equal(cas_old[p], mem)
        mem = torch.where(mem == p, p + 1, mem)
    assert torch.equal(cas, mem)
    assert flag.item() == 100  # program 0 won; later compares failed and left it alone


def test_bool_loads_and_stores(gen):
    B = 32
    m = rand(gen, (B,), torch.bool)
    x = rand(gen, (B,), torch.float32)
    out = poisoned((B,), torch.float32)
    flags = poisoned((B,), torch.bool)
    K.bool_kernel[(1,)](m, x, out, flags, BLOCK=B)
    assert torch.equal(out, torch.where(m, x, -1.0))
    assert torch.equal(flags, (m & (x > 0)) | ~m)


def test_out_of_bounds_access_names_the_kernel_line(gen):
    x = torch.zeros(10)
    out = poisoned((16,), torch.float32)
    K.oob_kernel[(1,)](torch.zeros(16), out, 16, BLOCK=16)  # in bounds
    with pytest.raises(IndexError, match=r"language\.py:\d+:\d+: out-of-bounds load"):
        K.oob_kernel[(1,)](x, out, 10, BLOCK=16)


def test_triton_interpret_env_also_works(monkeypatch, gen):
    monkeypatch.delenv("BLOCKTUNE_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = rand(gen, (100,), torch.float32)
    y = poisoned((100,), torch.float32)
    K.copy_kernel[(1,)](x, y, 100, BLOCK=128)
    assert torch.equal(x, y)


# ---------------------------------------------------------------------------------------------
# dot

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_matmul(gen, dtype):
    M, N, K_ = 48, 40, 72
    a = rand(gen, (M, K_), dtype)
    b = rand(gen, (K_, N), dtype)
    c = poisoned((M, N), dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    K.matmul_kernel[grid](a, b, c, M, N, K_, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                          c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    ref = (a.double() @ b.double())
    if dtype == torch.float32:  # the default input precision is tf32 (10-bit mantissa inputs)
        torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2)
    else:
        assert_close(c, ref.to(dtype))


def test_matmul_transposed_strides(gen):
    M, N, K_ = 32, 32, 64
    a = rand(gen, (K_, M), torch.float16).T  # column-major view
    b = rand(gen, (N, K_), torch.float16).T
    c = poisoned((M, N), torch.float32)
    K.matmul_kernel[(1, 1)](a, b, c, M, N, K_, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                            c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("precision", ["ieee", "tf32"])
def test_dot_input_precision(gen, precision):
    M = N = K_ = 16
    a = rand(gen, (M, K_), torch.float32)
    b = rand(gen, (K_, N), torch.float32)
    c = poisoned((M, N), torch.float32)
    K.dot_simple_kernel[(1,)](a, b, c, M=M, N=N, K=K_, PRECISION=precision)
    ref = a.double() @ b.double()
    if precision == "ieee":
        torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(c.double(), ref, rtol=5e-3, atol=5e-3)


# ---------------------------------------------------------------------------------------------
# device print / assert

def test_device_print(gen, capfd):
    x = torch.tensor([1.5, -2.0, 3.25, 0.0])
    K.print_kernel[(2,)](x, BLOCK=4)
    lines = [ln for ln in capfd.readouterr().out.splitlines() if ln.startswith("pid")]
    assert len(lines) == 8
    for k, ln in enumerate(lines):
        pid, i = divmod(k, 4)
        assert re.fullmatch(rf"pid \({pid}, 0, 0\) idx \(\s*{i}\) x: ?{re.escape(str(x[i].item()))}", ln), ln


def test_device_assert(gen):
    x = torch.tensor([1, 2, 3, -4], dtype=torch.int32)
    K.assert_kernel[(1,)](x, 3, BLOCK=4)
    with pytest.raises(AssertionError, match="x must be non-negative"):
        K.assert_kernel[(1,)](x, 4, BLOCK=4)
