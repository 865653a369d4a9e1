"""fp8 (tl.float8e4nv, tl.float8e5 and Triton's other fp8 names): conversions bit-exact in interpret
mode over every bit pattern, fp_downcast_rounding, fp8 tl.dot in interpret mode, the compile errors,
and the PTX of fp8 casts and dots assembled with ptxas (sm_90). GPU runs: test_fp8_gpu.py.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import compiler as triton  # noqa: E402
import compiler.language as tl  # noqa: E402
from compiler import ptxas  # noqa: E402
from compiler.ptxas import require as find_ptxas  # noqa: E402
from tests.compiler.kernels import fp8 as K  # noqa: E402

TORCH_FP8 = {tl.float8e4nv: torch.float8_e4m3fn, tl.float8e5: torch.float8_e5m2,
             tl.float8e4b8: torch.float8_e4m3fnuz, tl.float8e5b16: torch.float8_e5m2fnuz}
ALL_FP8 = [tl.float8e4nv, tl.float8e5, tl.float8e4b15, tl.float8e4b8, tl.float8e5b16]


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


# ---- references -----------------------------------------------------------------------------

def e4b15_values() -> np.ndarray:
    """The 256 values of e4m3 with exponent bias 15 as Triton's GPU conversion reads them: no NaN
    or infinity (S.1111.111 is ±1.875)."""
    out = np.empty(256)
    for bits in range(256):
        sign = -1.0 if bits & 0x80 else 1.0
        e, m = (bits >> 3) & 0xF, bits & 7
        if e == 0:
            out[bits] = sign * m / 8 * 2.0 ** (1 - 15)
        else:
            out[bits] = sign * (1 + m / 8) * 2.0 ** (e - 15)
    return out


def reference_values(ty) -> np.ndarray:
    """float64 value of each of the 256 bit patterns."""
    if ty is tl.float8e4b15:
        return e4b15_values()
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(TORCH_FP8[ty]).double().numpy()


def e4b15_reference_encode(x: torch.Tensor) -> np.ndarray:
    """Triton's conversion to e4b15 on NVIDIA GPUs, from its values: fp32 first rounded toward
    zero to fp16; |x| (NaN and infinities too) clamped to 1.75; then rounded to the e4b15 grid
    half up (ties away from zero); the sign kept (-0 and negative NaN included)."""
    h = rtz_fp16_reference(x.double().numpy()) if x.dtype == torch.float32 else x.numpy().astype(np.float16)
    neg = np.signbit(h)
    v = np.abs(h.astype(np.float64))
    v = np.where(np.isnan(v) | (v > 1.75), 1.75, v)
    with np.errstate(divide="ignore"):
        ulp = 2.0 ** (np.maximum(np.floor(np.log2(np.where(v > 0, v, 1.0))), -14) - 3)
    q = np.floor(v / ulp + 0.5) * ulp
    vals = e4b15_values()[:128]
    code = np.searchsorted(vals, q)
    assert np.array_equal(vals[code], q)
    return (code | np.where(neg, 0x80, 0)).astype(np.uint8)


def reference_encode(x: torch.Tensor, ty) -> np.ndarray:
    """Nearest-even fp8 bits with satfinite (finite overflow and ±inf → ±max, NaN → NaN), as
    cvt.rn.satfinite does: torch's conversion of the clamped value, or for e4b15 (no torch type,
    no hardware conversion) Triton's conversion (e4b15_reference_encode)."""
    if ty is tl.float8e4b15:
        return e4b15_reference_encode(x)
    x = x.double()
    if ty in TORCH_FP8:
        mx = torch.finfo(TORCH_FP8[ty]).max
        return x.clamp(-mx, mx).to(TORCH_FP8[ty]).view(torch.uint8).numpy()
    vals = reference_values(ty)
    finite = np.flatnonzero(np.isfinite(vals))
    nan = np.isnan(x.numpy())
    xv = np.clip(np.where(nan, 0.0, x.numpy()), -np.nanmax(vals), np.nanmax(vals))
    dist = np.abs(xv[:, None] - vals[finite][None, :])
    best = dist.min(axis=1, keepdims=True)
    cand = np.where(dist == best, finite[None, :], 1 << 20)
    even = np.where(cand % 2 == 0, cand, 1 << 20).min(axis=1)
    code = np.where(even < 1 << 20, even, cand.min(axis=1))
    sign_ok = np.where((vals[code] == 0) & np.signbit(xv), code | 0x80, code)  # -0 keeps its sign
    return np.where(nan, 0x7F, sign_ok).astype(np.uint8)


def rtz_fp16_reference(x: np.ndarray) -> np.ndarray:
    """float64 → fp16 rounded toward zero: |x| truncated to a multiple of its fp16 ulp, finite
    overflow → ±65504, ±inf and NaN kept."""
    a = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
        ulp = 2.0 ** (np.maximum(e, -14) - 10)
        q = np.minimum(np.floor(a / ulp) * ulp, 65504.0)
    q = np.where(np.isinf(a), np.inf, q)
    return np.where(np.isnan(x), np.nan, np.copysign(q, x)).astype(np.float16)


def float_samples(n=20000, seed=0) -> torch.Tensor:
    """fp32 values over fp8's whole range (subnormals, ties, overflow) and the special values."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.empty(n).uniform_(-22, 18, generator=g)) * torch.randn(n, generator=g).sign()
    specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, 464.0, 480.0, -500.0,
                             57344.0, 61440.0, 1e9, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11, 2.0 ** -17, 1.0625, 1.1875])
    return torch.cat([mag, specials])


def all_fp16() -> torch.Tensor:
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)


def same_bits(actual: np.ndarray, expected: np.ndarray, ty) -> None:
    """Bit patterns equal, NaN patterns compared as NaN (PTX's canonical NaN is 0x7F)."""
    vals = reference_values(ty)
    nan_a, nan_e = np.isnan(vals[actual]), np.isnan(vals[expected])
    assert np.array_equal(nan_a, nan_e)
    bad = np.flatnonzero((actual != expected) & ~nan_e)
    assert bad.size == 0, f"{bad.size} mismatches, e.g. bits {actual[bad[:5]]} != {expected[bad[:5]]}"


def run_convert(x, out_dtype, rounding=None, device="cpu"):
    """x: a tensor or a reinterpreted one (TensorWrapper: the element count from its base)."""
    n = getattr(x, "base", x).numel()
    out = torch.full((n,), float("nan"), dtype=out_dtype, device=device)
    K.convert_kernel[(triton.cdiv(n, 1024),)](x, out, n, ROUNDING=rounding, BLOCK=1024)
    return out


def fp8_tensor(bits: torch.Tensor, ty):
    """uint8 bits as a kernel argument of fp8 type `ty` (a torch fp8 tensor, or reinterpret)."""
    return bits.view(TORCH_FP8[ty]) if ty in (tl.float8e4nv, tl.float8e5) else triton.reinterpret(bits, ty)


# ---- interpret mode: conversions over every bit pattern -----------------------------------------

@pytest.mark.parametrize("ty", ALL_FP8, ids=str)
@pytest.mark.parametrize("dst", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_every_fp8_value_converts_exactly(interpret, ty, dst):
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    out = run_convert(fp8_tensor(bits, ty), dst)
    ref = reference_values(ty)
    got = out.double().numpy()
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    assert np.array_equal(got[ok], ref[ok]) and np.array_equal(np.signbit(got[ok]), np.signbit(ref[ok]))


@pytest.mark.parametrize("ty,src", [(ty, src) for ty in ALL_FP8 for src in ("fp32", "fp16_all", "bf16")
                                    if not (ty is tl.float8e4b15 and src == "bf16")], ids=str)
def test_float_to_fp8_rounds_as_triton_does(interpret, ty, src):
    """Nearest even with satfinite (cvt.rn.satfinite); e4b15: Triton's software conversion."""
    x = {"fp32": float_samples(), "fp16_all": all_fp16(), "bf16": float_samples(seed=1).bfloat16()}[src]
    out = torch.empty(x.shape, dtype=torch.uint8)
    K.convert_kernel[(triton.cdiv(x.numel(), 1024),)](x, fp8_tensor(out, ty), x.numel(), ROUNDING=None, BLOCK=1024)
    same_bits(out.numpy(), reference_encode(x, ty), ty)


def test_fp8_to_fp8_rounds_once(interpret):
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for src, dst in ((tl.float8e4nv, tl.float8e5), (tl.float8e5, tl.float8e4nv)):
        out = torch.empty(256, dtype=torch.uint8)
        K.convert_kernel[(1,)](fp8_tensor(bits, src), fp8_tensor(out, dst), 256, ROUNDING=None, BLOCK=1024)
        same_bits(out.numpy(), reference_encode(torch.from_numpy(reference_values(src)), dst), dst)


def test_rtz_downcasts(interpret):
    x = float_samples(seed=2)
    h = run_convert(x, torch.float16, "rtz")
    ref = rtz_fp16_reference(x.double().numpy())
    assert np.array_equal(h.numpy().view(np.uint16)[~np.isnan(ref)], ref.view(np.uint16)[~np.isnan(ref)])
    bf = run_convert(x, torch.bfloat16, "rtz")
    truncated = (x.view(torch.int32) & -65536).view(torch.float32)
    finite = torch.isfinite(x)
    assert torch.equal(bf.float()[finite], truncated[finite])
    # into e5m2: Triton truncates the fp16 (rtz) to its high byte
    e5 = torch.empty(x.shape, dtype=torch.uint8)
    K.convert_kernel[(triton.cdiv(x.numel(), 1024),)](x, e5.view(torch.float8_e5m2), x.numel(), ROUNDING="rtz", BLOCK=1024)
    expect = (ref.view(np.uint16) >> 8).astype(np.uint8)
    same_bits(e5.numpy(), expect, tl.float8e5)
    # rtne is the default, spelled out
    h2 = run_convert(x, torch.float16, "rtne")
    assert torch.equal(h2.view(torch.int16), x.half().view(torch.int16))


@pytest.mark.parametrize("ty", [tl.float8e4nv, tl.float8e5, tl.float8e4b8], ids=str)
def test_abs_neg_where_on_fp8(interpret, ty):
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    outs = [torch.empty(256, dtype=torch.uint8) for _ in range(3)]
    K.sign_ops_kernel[(1,)](fp8_tensor(bits, ty), *[fp8_tensor(o, ty) for o in outs], 256, BLOCK=256)
    vals = reference_values(ty)
    got = [reference_values(ty)[o.numpy()] for o in outs]
    neg = np.where(np.arange(256) % 2 == 0, vals, -vals)
    for g, r in ((got[0], np.abs(vals)), (got[1], -vals), (got[2], neg)):
        assert np.array_equal(np.isnan(g), np.isnan(r))
        ok = ~np.isnan(r)
        assert np.array_equal(g[ok], r[ok])


# ---- interpret mode: fp8 tl.dot -----------------------------------------------------------------

def random_fp8(shape, ty, gen):
    """Finite fp8 values of moderate size (bits with the exponent below its top)."""
    x = torch.randn(shape, generator=gen) * 4
    return x.to(TORCH_FP8[ty])


@pytest.mark.parametrize("a_ty,b_ty", [(tl.float8e4nv, tl.float8e4nv), (tl.float8e5, tl.float8e5),
                                       (tl.float8e4nv, tl.float8e5)], ids=str)
def test_fp8_dot_in_interpret_mode(interpret, a_ty, b_ty):
    gen = torch.Generator().manual_seed(3)
    a = random_fp8((70, 100), a_ty, gen)
    b = random_fp8((96, 100), b_ty, gen).T  # K-major B, as fp8 GEMMs store it
    c = K.run_matmul(a, b, 32, 32, 32, num_warps=4, imprecise=32)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-6


# ---- compile errors -----------------------------------------------------------------------------

@triton.jit
def _int_to_fp8_kernel(X, Y):
    tl.store(Y, tl.load(X).to(tl.float8e4nv))


@triton.jit
def _rtz_e4m3_kernel(X, Y):
    tl.store(Y, tl.load(X).to(tl.float8e4nv, fp_downcast_rounding="rtz"))


@triton.jit
def _upcast_rounding_kernel(X, Y):
    tl.store(Y, tl.load(X).to(tl.float32, fp_downcast_rounding="rtz"))


@triton.jit
def _sum_fp8_kernel(X, Y):
    tl.store(Y, tl.sum(tl.load(X + tl.arange(0, 16)), axis=0))


@triton.jit
def _dot_imprecise_kernel(A, Y):
    r = tl.arange(0, 32)
    a = tl.load(A + r[:, None] * 32 + r[None, :])
    tl.store(Y + r[:, None] * 32 + r[None, :], tl.dot(a, a, max_num_imprecise_acc=64))


@pytest.mark.parametrize("kernel,sig,message", [
    (_int_to_fp8_kernel, {"X": "*i32", "Y": "*fp8e4nv"}, r"cannot cast int32 to fp8e4nv"),
    (_rtz_e4m3_kernel, {"X": "*fp32", "Y": "*fp8e4nv"}, r"'rtz' is not supported for conversions to fp8e4nv"),
    (_upcast_rounding_kernel, {"X": "*fp16", "Y": "*fp32"}, r"fp_downcast_rounding should be set only for truncating"),
    (_sum_fp8_kernel, {"X": "*fp8e5", "Y": "*fp8e5"}, r"reduce of fp8e5 values is not supported.*\.to\(tl\.float32\)"),
    (_dot_imprecise_kernel, {"A": "*fp8e4nv", "Y": "*fp32"}, r"max_num_imprecise_acc \(64\) must be <= K \(32\)"),
])
def test_fp8_compile_errors(kernel, sig, message):
    with pytest.raises(triton.CompilationError, match=r"test_fp8.py:\d+:\d+: .*" + message):
        triton.compile(kernel, signature=sig, target="sm_90")


@pytest.mark.parametrize("ty", ["fp8e4b8", "fp8e5b16"])
def test_fp8_formats_without_conversions_say_so_in_tritons_words(ty):
    """Triton's tests match "not supported in this architecture"."""
    with pytest.raises(triton.CompilationError, match=r"not supported in this architecture"):
        triton.compile(K.convert_kernel, signature={"X": f"*{ty}", "Y": "*fp32", "N": "i32"},
                       constexprs={"ROUNDING": None, "BLOCK": 128}, target="sm_90")


@triton.jit
def _unused_dot_kernel(X, DT: tl.constexpr, SIZE: tl.constexpr):
    a = tl.full((SIZE, SIZE), 0.0, DT)
    tl.dot(a, a)                          # nothing uses it: dead code, still checked
    tl.store(X, 1)


@pytest.mark.parametrize("dt,size,message", [(tl.float8e4b8, 64, "not supported in this architecture"),
                                             (tl.float8e5b16, 64, "not supported in this architecture"),
                                             (tl.float16, 8, "Input shapes should have M >= 1, N >= 1 and K >= 16"),
                                             # Triton's minimum K depends on the width of the inputs
                                             (tl.float8e5, 16, "Input shapes should have M >= 1, N >= 1 and K >= 32"),
                                             (tl.int8, 16, "Input shapes should have M >= 1, N >= 1 and K >= 32"),
                                             (tl.float8e5, 8, "Input shapes should have M >= 1, N >= 1 and K >= 32")])
def test_what_the_gpu_refuses_is_refused_even_when_unused(dt, size, message):
    """Triton refuses these where they are written; blocktune's backend also looks at the ops dead
    code elimination dropped. The bare error is the cause, as Triton's tests read it."""
    with pytest.raises(triton.CompilationError, match=message) as e:
        triton.compile(_unused_dot_kernel, {"X": "*i32"}, {"DT": dt, "SIZE": size}, target="sm_90")
    assert message in str(e.value.__cause__)


def test_fp8_needs_sm89():
    with pytest.raises(triton.CompilationError, match=r"fp8e4nv needs sm_89 or newer"):
        triton.compile(K.convert_kernel, signature={"X": "*fp8e4nv", "Y": "*fp32", "N": "i32"},
                       constexprs={"ROUNDING": None, "BLOCK": 128}, target="sm_80")


# ---- PTX, assembled with ptxas (no GPU) ---------------------------------------------------------

def _ptx(kernel, sig, constexprs, num_warps=4, num_stages=3, **spec):
    find_ptxas()
    ck = triton.compile(kernel, signature=sig, constexprs=constexprs, num_warps=num_warps, num_stages=num_stages,
                        target="sm_90", **spec)
    ptx = ck.asm["ptx"]
    rep = ptxas.report(ptx)
    assert re.search(r"0 bytes spill stores", rep), rep
    return ptx


@pytest.mark.parametrize("src,dst,rounding,instr", [
    ("*fp8e4nv", "*fp32", None, "cvt.rn.f16x2.e4m3x2"),
    ("*fp8e5", "*bf16", None, "cvt.rn.f16x2.e5m2x2"),
    ("*fp8e4nv", "*fp16", None, "cvt.rn.f16x2.e4m3x2"),
    ("*fp32", "*fp8e4nv", None, "cvt.rn.satfinite.e4m3x2.f32"),
    ("*fp16", "*fp8e5", "rtne", "cvt.rn.satfinite.e5m2x2.f32"),
    ("*bf16", "*fp8e4nv", None, "cvt.rn.satfinite.e4m3x2.f32"),
    ("*fp32", "*fp8e5", "rtz", "cvt.rz.f16.f32"),
    ("*fp8e5", "*fp8e4nv", None, "cvt.rn.satfinite.e4m3x2.f32"),
    ("*fp32", "*fp16", "rtz", "cvt.rz.f16.f32"),
    ("*fp32", "*bf16", "rtz", "cvt.rz.bf16.f32"),
    ("*fp64", "*fp32", "rtz", "cvt.rz.f32.f64"),
])
def test_fp8_casts_assemble(src, dst, rounding, instr):
    ptx = _ptx(K.convert_kernel, {"X": src, "Y": dst, "N": "i32"}, {"ROUNDING": rounding, "BLOCK": 1024},
               divisible_by_16=("X", "Y", "N"))
    assert instr in ptx


MATMUL_SIG = dict(M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32", stride_bk="i32", stride_bn="i32",
                  stride_cm="i32", stride_cn="i32", C="*fp32")
K_MAJOR = dict(divisible_by_16=("A", "B", "C", "M", "N", "K", "stride_am", "stride_bn", "stride_cm"),
               equal_to_1=("stride_ak", "stride_bk", "stride_cn"))


@pytest.mark.parametrize("a,b,nw,blocks,instr", [
    ("*fp8e4nv", "*fp8e4nv", 4, (128, 128, 64), "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"),
    ("*fp8e4nv", "*fp8e5", 8, (128, 256, 128), "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e5m2"),
    ("*fp8e5", "*fp8e5", 2, (64, 32, 64), "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32"),
])
def test_fp8_dot_uses_fp8_tensor_cores_pipelined(a, b, nw, blocks, instr):
    bm, bn, bk = blocks
    ptx = _ptx(K.fp8_matmul_kernel, {"A": a, "B": b, **MATMUL_SIG}, {"BM": bm, "BN": bn, "BK": bk, "IMPRECISE": None},
               num_warps=nw, **K_MAJOR)
    assert instr in ptx
    assert "cp.async.cg.shared.global" in ptx  # K-major operands stream straight into the tiles


def test_fp8_dot_with_n_major_b_assembles():
    """B contiguous along N: fp8 tensor cores read K-major tiles only, so B is written transposed
    from registers (no cp.async pipeline), still on wgmma."""
    ptx = _ptx(K.fp8_matmul_kernel, {"A": "*fp8e4nv", "B": "*fp8e4nv", **MATMUL_SIG},
               {"BM": 64, "BN": 64, "BK": 64, "IMPRECISE": None}, num_warps=4,
               divisible_by_16=("A", "B", "C", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"),
               equal_to_1=("stride_ak", "stride_bn", "stride_cn"))
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3" in ptx


@pytest.mark.parametrize("imprecise", [32, 64, 128])
def test_max_num_imprecise_acc_promotes_partial_sums(imprecise):
    """As Triton on Hopper: every `imprecise` elements of K, the wgmma partial sums are added into
    the fp32 accumulator (one add.f32 per accumulator register each time)."""
    bm, bn, bk, nw = 128, 128, 128, 8
    ptx = _ptx(K.fp8_matmul_kernel, {"A": "*fp8e5", "B": "*fp8e5", **MATMUL_SIG},
               {"BM": bm, "BN": bn, "BK": bk, "IMPRECISE": imprecise}, num_warps=nw, **K_MAJOR)
    assert ptx.count("add.f32") == bm * bn // (32 * nw) * (bk // imprecise)
    default = _ptx(K.fp8_matmul_kernel, {"A": "*fp8e5", "B": "*fp8e5", **MATMUL_SIG},
                   {"BM": bm, "BN": bn, "BK": bk, "IMPRECISE": None}, num_warps=nw, **K_MAJOR)
    assert default.count("add.f32") == 0


def test_fp8_sign_ops_assemble():
    """|x| and -x of fp8 clear / flip the sign bit: integer ops on the bits, no conversion."""
    ptx = _ptx(K.sign_ops_kernel, {"X": "*fp8e4nv", "Abs": "*fp8e4nv", "Neg": "*fp8e4nv", "Sel": "*fp8e4nv", "N": "i32"},
               {"BLOCK": 1024}, divisible_by_16=("X", "Abs", "Neg", "Sel", "N"))
    assert "cvt.rn" not in ptx and re.search(r"and\.b(16|32)\s", ptx) and re.search(r"xor\.b(16|32)\s", ptx)


# ---- float8e4b15: Triton's software conversions ---------------------------------------------------

def _tritons_fp16_to_e4b15_asm(h: np.ndarray) -> np.ndarray:
    """A model of the instructions of Triton's convert_float16_to_fp8e4b15 (sm_80+: min.f16x2)
    on pairs of fp16 words: and.b32, min.f16x2 with 0x3F00, mad.lo.u32 ×2 + 0x00800080,
    lop3.b32 (a & 0x80008000) | b (0xea), prmt.b32 0x7531 (the high byte of each half)."""
    bits = h.view(np.uint16).astype(np.uint64)
    words = bits[0::2] | (bits[1::2] << 16)
    a = words & 0x7FFF7FFF
    halves = [((a >> s) & 0xFFFF).astype(np.uint16).view(np.float16) for s in (0, 16)]
    mins = [np.where(np.isnan(x) | (x > np.float16(1.75)), np.float16(1.75), x).view(np.uint16).astype(np.uint64)
            for x in halves]                                     # min.f16x2: NaN gives the other operand
    a = mins[0] | (mins[1] << 16)
    a = (a * 2 + 0x00800080) & 0xFFFFFFFF
    b = (words & 0x80008000) | a
    out = np.empty(bits.size, dtype=np.uint8)
    out[0::2], out[1::2] = (b >> 8) & 0xFF, (b >> 24) & 0xFF
    return out


def _tritons_e4b15_to_fp16_asm(bytes_: np.ndarray) -> np.ndarray:
    """A model of Triton's convert_fp8e4b15_to_float16 on 4 bytes: prmt 0x5746, the masks, shr,
    add of the sign bits, lop3 0xf8, shl 7."""
    x = bytes_.astype(np.uint64).reshape(-1, 4)
    a0 = x[:, 2] | (x[:, 0] << 8) | (x[:, 3] << 16) | (x[:, 1] << 24)
    b0 = (a0 & 0x7F007F00) >> 1
    b1 = (a0 & 0x00FF00FF) + (a0 & 0x00800080)
    r0 = b0 | (a0 & 0x80008000)
    r1 = (b1 << 7) & 0xFFFFFFFF
    out = np.stack([r0 & 0xFFFF, r0 >> 16, r1 & 0xFFFF, r1 >> 16], axis=1).reshape(-1)
    return out.astype(np.uint16).view(np.float16)


def test_e4b15_upcast_is_tritons_asm(interpret):
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    out = run_convert(fp8_tensor(bits, tl.float8e4b15), torch.float16)
    assert np.array_equal(out.numpy().view(np.uint16), _tritons_e4b15_to_fp16_asm(bits.numpy()).view(np.uint16))


def test_e4b15_downcast_from_every_fp16_is_tritons_asm(interpret):
    x = all_fp16()
    out = torch.empty(x.shape, dtype=torch.uint8)
    K.convert_kernel[(triton.cdiv(x.numel(), 1024),)](x, fp8_tensor(out, tl.float8e4b15), x.numel(), ROUNDING=None,
                                                      BLOCK=1024)
    assert np.array_equal(out.numpy(), _tritons_fp16_to_e4b15_asm(x.numpy()))


def test_e4b15_constants_encode_as_the_conversion(interpret):
    from compiler import fp8
    x = float_samples(seed=5)
    assert np.array_equal(fp8.from_float(x.numpy(), "fp8e4b15"), e4b15_reference_encode(x))


@triton.jit
def _bf16_to_e4b15_kernel(X, Y):
    tl.store(Y, tl.load(X).to(tl.float8e4b15))


def test_e4b15_from_other_types_is_refused_as_triton_does():
    with pytest.raises(triton.CompilationError, match="cannot cast bf16 to fp8e4b15: Triton converts float16 and float32"):
        triton.compile(_bf16_to_e4b15_kernel, signature={"X": "*bf16", "Y": "*fp8e4b15"}, target="sm_90")


@pytest.mark.parametrize("src,dst", [("*fp8e4b15", "*fp16"), ("*fp8e4b15", "*fp32"), ("*fp8e4b15", "*bf16"),
                                     ("*fp16", "*fp8e4b15"), ("*fp32", "*fp8e4b15")])
def test_e4b15_conversions_assemble_for_sm90(src, dst):
    ptx = _ptx(K.convert_kernel, {"X": src, "Y": dst, "N": "i32"}, {"ROUNDING": None, "BLOCK": 1024})
    assert "cvt.rn.f16x2.e4m3x2" not in ptx and "satfinite" not in ptx   # integer ops, no fp8 hardware
    if src == "*fp32":
        assert "cvt.rz.f16.f32" in ptx


@triton.jit
def _e4b15_dot_kernel(A, C, DT: tl.constexpr):
    offs = tl.arange(0, 64)
    a = tl.load(A + offs[:, None] * 64 + offs[None, :]).to(DT, bitcast=True)
    tl.store(C + offs[:, None] * 64 + offs[None, :], tl.dot(a, a))


def test_fp8e4b15_dot_warns_on_hopper_as_triton_does():
    with pytest.warns(UserWarning, match="fp8e4b15 is deprecated on Hopper"):
        triton.compile(_e4b15_dot_kernel, signature={"A": "*u8", "C": "*fp32"}, constexprs={"DT": tl.float8e4b15},
                       target="sm_90", num_warps=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # the other fp8 kinds are Hopper's own: no warning
        triton.compile(_e4b15_dot_kernel, signature={"A": "*u8", "C": "*fp32"}, constexprs={"DT": tl.float8e4nv},
                       target="sm_90", num_warps=4)
