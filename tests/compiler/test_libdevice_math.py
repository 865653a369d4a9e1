"""tl.math, tl.clamp, tl.umulhi, tl.extra.cuda.libdevice (tutorial 07) and
tl.inline_asm_elementwise: interpret mode against torch/Python in float64 or exact integers, and,
marked `gpu`, the same checks on the GPU."""
from __future__ import annotations

import importlib.util
import math
import secrets
from fractions import Fraction

import numpy as np
import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler.backend.llvm_target import _libdevice, libdevice_path
from compiler.language.extra import libdevice
from compiler.language.extra.cuda import libdevice as cuda_libdevice
from tests.compiler.kernels import extern_math as K
from tests.compiler.kernels.util import interpret, poisoned  # noqa: F401

N = 300
BLOCK = 128


@pytest.fixture
def gen():
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    return torch.Generator().manual_seed(seed)


def uniform(gen, lo, hi, dtype=torch.float32, n=N):
    return (torch.rand(n, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def grid(n=N):
    return (triton.cdiv(n, BLOCK),)


def run(kernel, inputs, out_dtype, device, n=N, outputs=1, **meta):
    inputs = [t.to(device) for t in inputs]
    y = poisoned((outputs * n,), out_dtype).to(device)
    kernel[grid(n)](*inputs, y, n, BLOCK=BLOCK, **meta)
    return y.cpu()


def close(out, ref, rtol, atol):
    torch.testing.assert_close(out.double(), ref.double(), rtol=rtol, atol=atol, equal_nan=True)


# (function, input range, float64 reference); inputs are drawn in the range
D = torch.float64
def _mp(fn, order):
    """A Bessel function through mpmath: torch's CPU bessel_j0/y0/... are only good to ~3e-7, too
    coarse to check libdevice's fp64 versions (mpmath comes with torch, through sympy)."""
    def ref(x):
        import mpmath
        f = getattr(mpmath, fn)
        return torch.tensor([float(f(order, float(v))) for v in x.double().cpu()], dtype=torch.float64)
    return ref


UNARY = [
    ("acos", (-1, 1), torch.acos), ("acosh", (1, 10), torch.acosh), ("asin", (-1, 1), torch.asin),
    ("asinh", (-5, 5), torch.asinh), ("atan", (-5, 5), torch.atan), ("atanh", (-0.99, 0.99), torch.atanh),
    ("cbrt", (-8, 8), lambda x: torch.sign(x) * x.abs() ** (1 / 3)), ("ceil", (-5, 5), torch.ceil),
    ("cos", (-10, 10), torch.cos), ("cosh", (-5, 5), torch.cosh), ("cospi", (-3, 3), lambda x: torch.cos(math.pi * x)),
    ("erf", (-3, 3), torch.erf), ("erfc", (-3, 3), torch.erfc), ("erfinv", (-0.99, 0.99), torch.erfinv),
    ("erfcinv", (0.01, 1.99), lambda y: torch.erfinv(1 - y)), ("erfcx", (-1, 30), torch.special.erfcx),
    ("exp", (-10, 10), torch.exp), ("exp10", (-5, 5), lambda x: 10 ** x), ("exp2", (-10, 10), torch.exp2),
    ("expm1", (-1, 1), torch.expm1), ("floor", (-5, 5), torch.floor), ("lgamma", (0.1, 10), torch.lgamma),
    ("tgamma", (0.1, 8), lambda x: torch.exp(torch.lgamma(x))), ("log", (0.01, 100), torch.log),
    ("log10", (0.01, 100), torch.log10), ("log1p", (-0.5, 5), torch.log1p), ("log2", (0.01, 100), torch.log2),
    ("logb", (0.01, 1000), lambda x: torch.frexp(x)[1].double() - 1), ("rint", (-5, 5), torch.round),
    ("nearbyint", (-5, 5), torch.round), ("round", (-5, 5), lambda x: torch.sign(x) * torch.floor(x.abs() + 0.5)),
    ("rsqrt", (0.01, 100), torch.rsqrt), ("sin", (-10, 10), torch.sin), ("sinh", (-5, 5), torch.sinh),
    ("sinpi", (-3, 3), lambda x: torch.sin(math.pi * x)), ("sqrt", (0, 100), torch.sqrt), ("tan", (-1.5, 1.5), torch.tan),
    ("tanh", (-5, 5), torch.tanh), ("trunc", (-5, 5), torch.trunc), ("j0", (-20, 20), _mp("besselj", 0)),
    ("j1", (-20, 20), _mp("besselj", 1)), ("y0", (0.1, 20), _mp("bessely", 0)),
    ("y1", (0.1, 20), _mp("bessely", 1)), ("normcdf", (-5, 5), torch.special.ndtr),
    ("normcdfinv", (0.01, 0.99), torch.special.ndtri), ("cyl_bessel_i0", (-5, 5), torch.special.i0),
    ("cyl_bessel_i1", (-5, 5), torch.special.i1), ("abs", (-5, 5), torch.abs), ("rcbrt", (0.1, 8), lambda x: x ** (-1 / 3)),
    ("saturatef", (-2, 2), lambda x: x.clamp(0, 1)),
]
BINARY = [
    ("atan2", (-5, 5), (-5, 5), torch.atan2), ("copysign", (-5, 5), (-5, 5), torch.copysign),
    ("fdim", (-5, 5), (-5, 5), lambda x, y: (x - y).clamp(min=0)), ("fmod", (-10, 10), (0.5, 3), torch.fmod),
    ("hypot", (-5, 5), (-5, 5), torch.hypot), ("rhypot", (-5, 5), (0.5, 5), lambda x, y: 1 / torch.hypot(x, y)),
    ("pow", (0.1, 5), (-3, 3), torch.pow),
    ("remainder", (-10, 10), (0.5, 3), lambda x, y: x - y * torch.round(x / y)),
    ("add_rn", (-5, 5), (-5, 5), torch.add), ("mul_rn", (-5, 5), (-5, 5), torch.mul),
    ("div_rn", (-5, 5), (0.5, 5), torch.div), ("sub_rn", (-5, 5), (-5, 5), torch.sub),
]


def cases(table):
    """(case, dtype) for each dtype the libdevice function takes."""
    out = []
    for case in table:
        for dtype, name in ((torch.float32, "fp32"), (torch.float64, "fp64")):
            if any(all(a == name for a in args) for args in cuda_libdevice.SIGNATURES[case[0]]):
                out.append(pytest.param(*case, dtype, id=f"{case[0]}-{name}"))
    return out


def _fp32_tolerance(name):
    # libdevice's fp32 functions are within a few ulp; the ones near a root of the function get an
    # absolute margin, the fast_* ones are approximate by design
    return (4e-6, 2e-6) if name not in ("lgamma", "tgamma", "j0", "j1", "y0", "y1", "erfcx", "erfcinv") else (2e-5, 2e-5)


def check_unary(name, rng, ref, dtype, device, gen):
    x = uniform(gen, *rng, dtype)
    y = run(K.apply1_kernel, [x], dtype, device, FN=getattr(libdevice, name))
    rtol, atol = _fp32_tolerance(name) if dtype == torch.float32 else (1e-12, 1e-12)
    if device == "cpu" and name in ("j0", "j1", "y0", "y1") and importlib.util.find_spec("scipy") is None:
        atol = 1e-6   # the interpreter falls back on torch's Bessel functions, good to ~3e-7
    close(y, ref(x.to(D)), rtol, atol)


def check_binary(name, rx, rz, ref, dtype, device, gen):
    x, z = uniform(gen, *rx, dtype), uniform(gen, *rz, dtype)
    y = run(K.apply2_kernel, [x, z], dtype, device, FN=getattr(libdevice, name))
    expected = ref(x.to(D), z.to(D))
    if name.endswith("_rn"):  # correctly rounded: exactly the float64 result rounded once
        assert torch.equal(y, expected.to(dtype) if dtype == torch.float64 else ref(x, z))
        return
    rtol, atol = _fp32_tolerance(name) if dtype == torch.float32 else (1e-12, 1e-12)
    close(y, expected, rtol, atol)


# ---- interpret mode ---------------------------------------------------------------------------

@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("path", [K.asin_kernel, K.asin_cuda_path_kernel], ids=["extra.libdevice", "extra.cuda.libdevice"])
def test_tutorial_07_asin(path, gen):
    x = uniform(gen, -1, 1, n=1000)
    y = poisoned((1000,), torch.float32)
    path[(triton.cdiv(1000, 256),)](x, y, 1000, BLOCK_SIZE=256)
    close(y, torch.asin(x.double()), 2e-6, 1e-7)


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("name,rng,ref,dtype", cases(UNARY))
def test_libdevice_unary(name, rng, ref, dtype, gen):
    check_unary(name, rng, ref, dtype, "cpu", gen)


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("name,rx,rz,ref,dtype", cases(BINARY))
def test_libdevice_binary(name, rx, rz, ref, dtype, gen):
    check_binary(name, rx, rz, ref, dtype, "cpu", gen)


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("mode", ["rz", "rd", "ru"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_directed_rounding_brackets_the_exact_result(op, mode, dtype, gen):
    """x op z rounded toward zero/down/up: on the right side of the exact rational result, and
    within one ulp of it."""
    x, z = uniform(gen, -100, 100, dtype, n=64), uniform(gen, 0.5, 100, dtype, n=64)
    y = run(K.apply2_kernel, [x, z], dtype, "cpu", n=64, FN=getattr(libdevice, f"{op}_{mode}"))
    exact_op = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b}[op]
    npt = np.float32 if dtype == torch.float32 else np.float64
    for a, b, r in zip(x.tolist(), z.tolist(), y.numpy()):
        q = exact_op(Fraction(a), Fraction(b))
        rr = Fraction(float(r))
        if mode == "rd" or (mode == "rz" and q > 0):
            assert rr <= q < Fraction(float(np.nextafter(r, npt(np.inf))))
        else:
            assert Fraction(float(np.nextafter(r, npt(-np.inf)))) < q <= rr


@pytest.mark.usefixtures("interpret")
def test_fma_and_sqrt_rounding_modes(gen):
    x, z, w = (uniform(gen, 0.5, 4, n=64) for _ in range(3))
    for mode in ("rn", "rz", "rd", "ru"):
        fma = run(K.apply3_kernel, [x, z, w], torch.float32, "cpu", n=64, FN=getattr(libdevice, f"fma_{mode}")).numpy()
        sq = run(K.apply1_kernel, [x], torch.float32, "cpu", n=64, FN=getattr(libdevice, f"sqrt_{mode}")).numpy()
        for a, b, c, f, s in zip(x.tolist(), z.tolist(), w.tolist(), fma, sq):
            q = Fraction(a) * Fraction(b) + Fraction(c)
            lo, hi = np.nextafter(f, np.float32(-np.inf)), np.nextafter(f, np.float32(np.inf))
            assert Fraction(float(lo)) < q < Fraction(float(hi))
            if mode in ("rz", "rd"):
                assert Fraction(float(f)) <= q and Fraction(float(s)) ** 2 <= Fraction(a) < Fraction(float(np.nextafter(s, np.float32(np.inf)))) ** 2
            if mode == "ru":
                assert Fraction(float(f)) >= q and Fraction(float(s)) ** 2 >= Fraction(a) > Fraction(float(np.nextafter(s, np.float32(0)))) ** 2
            if mode == "rn":
                assert f == np.float32(a * b + c) and s == np.float32(math.sqrt(a))


@pytest.mark.usefixtures("interpret")
def test_pow_with_python_number_exponents(gen):
    x = uniform(gen, 0.1, 3)
    y = run(K.pow_scalar_exponents_kernel, [x], torch.float32, "cpu", outputs=2)
    close(y[:N], x.double() ** 3, 2e-6, 1e-7)
    close(y[N:], x.double() ** 0.5, 2e-6, 1e-7)


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extern_elementwise_with_a_symbol_table(dtype, gen):
    x = uniform(gen, 0.1, 3, dtype)
    y = run(K.extern_elementwise_kernel, [x], dtype, "cpu")
    close(y, x.double() ** 2, 2e-6 if dtype == torch.float32 else 1e-12, 0)


def test_extern_elementwise_calls_only_libdevice():
    @triton.jit
    def other_library(X, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs)
        tl.store(X + offs, tl.extern_elementwise("libm", "", [x], {(tl.float32,): ("sinf", tl.float32)}, is_pure=True))

    with pytest.raises(triton.CompilationError, match=r"only libdevice functions \(__nv_\*\) can be called, got 'sinf'"):
        triton.compile(other_library, signature={"X": "*fp32"}, constexprs={"BLOCK": 32}, target="sm_90")


@pytest.mark.usefixtures("interpret")
def test_classification():
    x = torch.tensor([0.0, -0.0, 1.5, -2.0, float("inf"), -float("inf"), float("nan"), 1e-40] * 4)
    y = run(K.classify_kernel, [x], torch.int32, "cpu", n=32)
    expected = [8, 12, 8, 12, 2, 6, 1, 8] * 4  # isnan 1, isinf 2, signbit 4, finite 8
    assert y.tolist() == expected


INT_FUNCS = [
    ("clz", lambda v, bits: bits - (v % 2**bits).bit_length()),
    ("popc", lambda v, bits: bin(v % 2**bits).count("1")),
    ("ffs", lambda v, bits: ((v % 2**bits) & -(v % 2**bits)).bit_length()),
    ("brev", lambda v, bits: int(format(v % 2**bits, f"0{bits}b")[::-1], 2)),
]


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("name,ref", INT_FUNCS, ids=[f[0] for f in INT_FUNCS])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_bit_functions(name, ref, dtype, gen):
    bits = 32 if dtype == torch.int32 else 64
    x = torch.randint(-2**(bits - 1), 2**(bits - 1) - 1, (N,), generator=gen, dtype=torch.int64).to(dtype)
    x[:3] = torch.tensor([0, -1, 1], dtype=dtype)
    out_dtype = dtype if name == "brev" else torch.int32
    y = run(K.apply1_kernel, [x], out_dtype, "cpu", FN=getattr(libdevice, name))
    expected = [ref(int(v), bits) for v in x.tolist()]
    out_bits = bits if name == "brev" else 32
    assert [int(v) % 2**out_bits for v in y.tolist()] == [e % 2**out_bits for e in expected]


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_mulhi_and_umulhi(dtype, gen):
    bits = 32 if dtype == torch.int32 else 64
    lo, hi = -2**(bits - 1), 2**(bits - 1) - 1
    x = torch.randint(lo, hi, (N,), generator=gen, dtype=torch.int64).to(dtype)
    z = torch.randint(lo, hi, (N,), generator=gen, dtype=torch.int64).to(dtype)
    signed_hi = run(K.apply2_kernel, [x, z], dtype, "cpu", FN=libdevice.mulhi)
    assert signed_hi.tolist() == [(a * b) >> bits for a, b in zip(x.tolist(), z.tolist())]
    unsigned_hi = run(K.umulhi_kernel, [x, z], dtype, "cpu")
    assert [v % 2**bits for v in unsigned_hi.tolist()] == \
        [((a % 2**bits) * (b % 2**bits)) >> bits for a, b in zip(x.tolist(), z.tolist())]


@pytest.mark.usefixtures("interpret")
def test_conversions_round_and_saturate():
    x = torch.tensor([2.5, -2.5, 3.7, -3.7, 1e20, -1e20, float("nan"), 0.5] * 4)
    expected = {"rn": [2, -2, 4, -4, 2**31 - 1, -2**31, 0, 0], "rz": [2, -2, 3, -3, 2**31 - 1, -2**31, 0, 0],
                "rd": [2, -3, 3, -4, 2**31 - 1, -2**31, 0, 0], "ru": [3, -2, 4, -3, 2**31 - 1, -2**31, 0, 1]}
    for mode, values in expected.items():
        y = run(K.apply1_kernel, [x], torch.int32, "cpu", n=32, FN=getattr(libdevice, f"float2int_{mode}"))
        assert y.tolist() == values * 4, mode


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("name,src", [("ll2float", torch.int64), ("double2float", torch.float64), ("int2float", torch.int32)])
def test_narrowing_conversions_round_in_their_direction(name, src, gen):
    if src.is_floating_point:
        x = torch.randn(64, generator=gen, dtype=torch.float64) * 1e6
    else:
        info = torch.iinfo(src)
        x = torch.randint(info.min, info.max, (64,), generator=gen, dtype=torch.int64).to(src)
    for mode in ("rn", "rz", "rd", "ru"):
        y = run(K.apply1_kernel, [x], torch.float32, "cpu", n=64, FN=getattr(libdevice, f"{name}_{mode}")).numpy()
        for v, r in zip(x.tolist(), y):
            q, rr = Fraction(v), Fraction(float(r))
            below, above = Fraction(float(np.nextafter(r, np.float32(-np.inf)))), Fraction(float(np.nextafter(r, np.float32(np.inf))))
            assert below < q < above or q == rr, (mode, v, r)
            if mode == "rd" or (mode == "rz" and q > 0):
                assert rr <= q, (mode, v, r)
            elif mode == "ru" or (mode == "rz" and q < 0):
                assert rr >= q, (mode, v, r)
            else:
                assert abs(rr - q) <= min(abs(below - q), abs(above - q)), (mode, v, r)


def test_every_symbol_is_in_libdevice():
    """Each libdevice function maps to symbols libdevice.10.bc defines (checked without a GPU)."""
    if libdevice_path() is None:
        pytest.fail("libdevice.10.bc not found (install nvidia-cuda-nvcc)")
    defined = set(_libdevice()[1])
    missing = sorted(sym for sigs in cuda_libdevice.SIGNATURES.values() for sym, _ in sigs.values() if sym not in defined)
    assert not missing


def test_libdevice_rejects_types_it_has_no_symbol_for():
    @triton.jit
    def fp16_kernel(X, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(X + offs, libdevice.asin(tl.load(X + offs)))

    with pytest.raises(triton.CompilationError, match=r"libdevice.asin takes arguments of types \(fp32\); \(fp64\), got \(fp16\)"):
        triton.compile(fp16_kernel, signature={"X": "*fp16"}, constexprs={"BLOCK": 32}, target="sm_90")


@pytest.mark.usefixtures("interpret")
def test_tl_math(gen):
    x, z = uniform(gen, -3, 3), uniform(gen, 0.1, 5)
    y = run(K.math_kernel, [x, z], torch.float32, "cpu", outputs=16)
    xd, zd = x.double(), z.double()
    refs = [xd.exp(), xd.exp2(), zd.log(), zd.log2(), xd.cos(), xd.sin(), zd.sqrt(), zd.rsqrt(), xd.abs(), xd / zd,
            xd / zd, torch.erf(xd), torch.floor(xd * 4), torch.ceil(xd * 4), xd * zd + xd, zd.sqrt()]
    for i, r in enumerate(refs):
        close(y[i * N:(i + 1) * N], r, 3e-6, 2e-6)
    # div_rn, sqrt_rn: IEEE, correctly rounded (numpy's float32 sqrt is; torch's CPU one is not always)
    assert torch.equal(y[10 * N:11 * N], x / z) and np.array_equal(y[15 * N:].numpy(), np.sqrt(z.numpy()))


@pytest.mark.usefixtures("interpret")
def test_math_tensor_members(gen):
    x = uniform(gen, 0.1, 3) * torch.where(torch.rand(N, generator=gen) > 0.5, 1, -1)
    y = run(K.members_kernel, [x], torch.float32, "cpu")
    xd = x.double()
    close(y, xd.cos() + xd.sin() + torch.erf(xd) + xd.floor() + xd.ceil() + xd.abs().sqrt() + xd.abs().rsqrt(), 1e-5, 1e-5)


@pytest.mark.usefixtures("interpret")
@pytest.mark.parametrize("propagate", [tl.PropagateNan.NONE, tl.PropagateNan.ALL])
def test_clamp(propagate, gen):
    x, lo = uniform(gen, -2, 2), uniform(gen, -1, 0)
    hi = lo + uniform(gen, 0, 1)
    x[:4] = float("nan")  # (a NaN bound is undefined behaviour in Triton: not tested)
    y = run(K.clamp_kernel, [x, lo, hi], torch.float32, "cpu", PROPAGATE_NAN=propagate)
    expected = torch.minimum(torch.maximum(x, lo), hi) if propagate == tl.PropagateNan.ALL else \
        torch.fmin(torch.fmax(x, lo), hi)
    assert torch.equal(y.isnan(), expected.isnan())
    assert torch.equal(y.nan_to_num(), expected.nan_to_num())
    if propagate == tl.PropagateNan.NONE:
        assert torch.equal(y[:4], lo[:4])  # a NaN x gives the lower bound, as maxnum does


def test_clamp_needs_floats():
    @triton.jit
    def int_clamp(X, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(X + offs, tl.clamp(tl.load(X + offs), 0, 3))

    with pytest.raises(triton.CompilationError, match="tl.clamp needs a floating-point value"):
        triton.compile(int_clamp, signature={"X": "*i32"}, constexprs={"BLOCK": 32}, target="sm_90")


@pytest.mark.usefixtures("interpret")
def test_inline_asm_is_refused_in_interpret_mode_at_its_line():
    x = torch.zeros(64, dtype=torch.uint8)
    with pytest.raises(Exception, match=r"extern_math\.py:\d+:\d+: tl.inline_asm_elementwise cannot run in interpret mode"):
        K.asm_shift_packed_kernel[(1,)](x, torch.zeros(64, dtype=torch.int8), BLOCK=64)


def test_inline_asm_argument_errors():
    @triton.jit
    def bad_pack(X, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs)
        tl.store(X + offs, tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=3))

    with pytest.raises(triton.CompilationError, match="pack must be a power of two"):
        triton.compile(bad_pack, signature={"X": "*i32"}, constexprs={"BLOCK": 32}, target="sm_90")

    @triton.jit
    def too_few_outputs(X, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs)
        tl.store(X + offs, tl.inline_asm_elementwise("mov.b32 $0, $2;", "=r,r,r,r,r", [x], dtype=tl.int32,
                                                     is_pure=True, pack=4))

    with pytest.raises(triton.CompilationError, match="constraints name 1 outputs .* give 4 registers"):
        triton.compile(too_few_outputs, signature={"X": "*i32"}, constexprs={"BLOCK": 32}, target="sm_90")


# ---- GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name,rng,ref,dtype", cases(UNARY))
def test_gpu_libdevice_unary(name, rng, ref, dtype, gen):
    check_unary(name, rng, ref, dtype, "cuda", gen)


@pytest.mark.gpu
@pytest.mark.parametrize("name,rx,rz,ref,dtype", cases(BINARY))
def test_gpu_libdevice_binary(name, rx, rz, ref, dtype, gen):
    check_binary(name, rx, rz, ref, dtype, "cuda", gen)


@pytest.mark.gpu
def test_gpu_tutorial_07_asin_and_math(gen):
    x = uniform(gen, -1, 1, n=98432).cuda()
    y = torch.full_like(x, float("nan"))
    K.asin_kernel[(triton.cdiv(98432, 1024),)](x, y, 98432, BLOCK_SIZE=1024)
    close(y.cpu(), torch.asin(x.double()).cpu(), 2e-6, 1e-7)
    v = torch.tensor([0.0, -0.0, 1.5, -2.0, float("inf"), -float("inf"), float("nan"), 1e-40] * 4)
    assert run(K.classify_kernel, [v], torch.int32, "cuda", n=32).tolist() == [8, 12, 8, 12, 2, 6, 1, 8] * 4
    xs, zs = uniform(gen, -3, 3), uniform(gen, 0.1, 5)
    y = run(K.math_kernel, [xs, zs], torch.float32, "cuda", outputs=16)
    assert torch.equal(y[10 * N:11 * N], xs / zs) and np.array_equal(y[15 * N:].numpy(), np.sqrt(zs.numpy()))
    close(y[:N], xs.double().exp(), 3e-6, 2e-6)
    pos = uniform(gen, 0.1, 3)
    close(run(K.extern_elementwise_kernel, [pos], torch.float32, "cuda"), pos.double() ** 2, 2e-6, 0)


@pytest.mark.gpu
def test_gpu_directed_rounding_and_conversions(gen):
    x, z = uniform(gen, -100, 100, n=256), uniform(gen, 0.5, 100, n=256)
    for op in ("add", "mul", "div"):
        for mode in ("rn", "rz", "rd", "ru"):
            fn = getattr(libdevice, f"{op}_{mode}")
            gpu = run(K.apply2_kernel, [x, z], torch.float32, "cuda", n=256, FN=fn)
            assert torch.equal(gpu, run_interpreted(K.apply2_kernel, [x, z], torch.float32, 256, FN=fn)), (op, mode)
    v = torch.tensor([2.5, -2.5, 3.7, -3.7, 1e20, -1e20, float("nan"), 0.5] * 4)
    for mode in ("rn", "rz", "rd", "ru"):
        fn = getattr(libdevice, f"float2int_{mode}")
        assert torch.equal(run(K.apply1_kernel, [v], torch.int32, "cuda", n=32, FN=fn),
                           run_interpreted(K.apply1_kernel, [v], torch.int32, 32, FN=fn)), mode
    big = torch.randint(-2**63, 2**63 - 1, (64,), generator=gen, dtype=torch.int64)
    wide = torch.randn(64, generator=gen, dtype=torch.float64) * 1e6
    for mode in ("rn", "rz", "rd", "ru"):
        for name, arg in (("ll2float", big), ("double2float", wide)):
            fn = getattr(libdevice, f"{name}_{mode}")
            assert torch.equal(run(K.apply1_kernel, [arg], torch.float32, "cuda", n=64, FN=fn),
                               run_interpreted(K.apply1_kernel, [arg], torch.float32, 64, FN=fn)), (name, mode)


def run_interpreted(kernel, inputs, out_dtype, n, **meta):
    mp = pytest.MonkeyPatch()
    mp.setenv("BLOCKTUNE_INTERPRET", "1")
    try:
        return run(kernel, inputs, out_dtype, "cpu", n=n, **meta)
    finally:
        mp.undo()


@pytest.mark.gpu
def test_gpu_clamp_umulhi_integer_functions(gen):
    x, lo = uniform(gen, -2, 2), uniform(gen, -1, 0)
    hi = lo + uniform(gen, 0, 1)
    x[:4] = float("nan")
    for p in (tl.PropagateNan.NONE, tl.PropagateNan.ALL):
        a = run(K.clamp_kernel, [x, lo, hi], torch.float32, "cuda", PROPAGATE_NAN=p)
        b = run_interpreted(K.clamp_kernel, [x, lo, hi], torch.float32, N, PROPAGATE_NAN=p)
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    for dtype in (torch.int32, torch.int64):
        bits = 32 if dtype == torch.int32 else 64
        xi = torch.randint(-2**(bits - 1), 2**(bits - 1) - 1, (N,), generator=gen, dtype=torch.int64).to(dtype)
        zi = torch.randint(-2**(bits - 1), 2**(bits - 1) - 1, (N,), generator=gen, dtype=torch.int64).to(dtype)
        assert torch.equal(run(K.umulhi_kernel, [xi, zi], dtype, "cuda"), run_interpreted(K.umulhi_kernel, [xi, zi], dtype, N))
        for name in ("clz", "popc", "ffs", "brev", "mulhi"):
            fn = getattr(libdevice, name)
            out = dtype if name in ("brev", "mulhi") else torch.int32
            args = [xi, zi] if name == "mulhi" else [xi]
            kern = K.apply2_kernel if name == "mulhi" else K.apply1_kernel
            assert torch.equal(run(kern, args, out, "cuda", FN=fn), run_interpreted(kern, args, out, N, FN=fn)), name


@pytest.mark.gpu
def test_gpu_inline_asm(gen):
    x = torch.randint(0, 256, (1024,), generator=gen, dtype=torch.int64).to(torch.uint8)
    y = torch.zeros(1024, dtype=torch.int8, device="cuda")
    K.asm_shift_packed_kernel[(1,)](x.cuda(), y, BLOCK=1024)
    assert torch.equal(y.cpu().view(torch.uint8), (x.to(torch.int64) << 3).remainder(256).to(torch.uint8))
    a = torch.randint(0, 2**32, (N,), generator=gen, dtype=torch.int64)
    b = torch.randint(0, 2**32, (N,), generator=gen, dtype=torch.int64)
    out = torch.full((N,), -1, dtype=torch.int32, device="cuda")
    K.asm_funnel_shift_kernel[grid()](a.to(torch.int32).cuda(), b.to(torch.int32).cuda(), out, N, SHIFT=7, BLOCK=BLOCK)
    expected = [(((bb << 32) | aa) << 7 >> 32) & 0xFFFFFFFF for aa, bb in zip(a.tolist(), b.tolist())]
    assert [v % 2**32 for v in out.cpu().tolist()] == expected
    lo = torch.full((N,), -1, dtype=torch.int32, device="cuda")
    hi = torch.full((N,), -1, dtype=torch.int32, device="cuda")
    K.asm_two_outputs_kernel[grid()](a.to(torch.int32).cuda(), lo, hi, N, BLOCK=BLOCK)
    assert [v % 2**32 for v in lo.cpu().tolist()] == [(v * v) % 2**32 for v in a.tolist()]
    assert [v % 2**32 for v in hi.cpu().tolist()] == [(v * v) >> 32 for v in a.tolist()]
    y8 = torch.zeros(1024, dtype=torch.uint8, device="cuda")
    K.asm_impure_store_kernel[(1,)](x.cuda(), y8, BLOCK=1024)       # result unused: it stores by itself
    assert torch.equal(y8.cpu(), (x.to(torch.int64) << 3).remainder(256).to(torch.uint8))
    bf = uniform(gen, -300, 300, n=1024)
    c = torch.full((1024,), -1, dtype=torch.int32, device="cuda")
    d = torch.full((1024,), float("nan"), device="cuda")
    K.asm_packed_two_outputs_kernel[(1,)](x.cuda(), bf.cuda(), c, d, BLOCK=1024)
    assert torch.equal(c.cpu(), x.to(torch.int32)) and torch.equal(d.cpu(), torch.maximum(x.float(), bf))
    sm = torch.full((64,), -1, dtype=torch.int32, device="cuda")
    times = torch.zeros(128, dtype=torch.int64, device="cuda")
    K.special_registers_kernel[(64,)](sm, times, torch.zeros(128, dtype=torch.int32, device="cuda"), BLOCK=128)
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    assert bool(((sm >= 0) & (sm < n_sm)).all()) and bool((times[1::2] > times[0::2]).all())
    f = uniform(gen, -3, 3)
    g = torch.full((N,), float("nan"), device="cuda")
    K.asm_float_kernel[grid()](f.cuda(), g, N, BLOCK=BLOCK)
    assert torch.equal(g.cpu(), (f.double() * f.double() + f.double()).float())  # fma: one rounding
