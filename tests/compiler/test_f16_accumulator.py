"""fp16 × fp16 → fp16 `tl.dot` (out_dtype=tl.float16, or an fp16 `acc=`) accumulates in fp16 on the
tensor cores, as Triton's does — the instruction Triton's test_dot looks for in the PTX — without a GPU
(GPU runs: test_f16_accumulator_gpu.py).

1. PTX of Triton's test_dot cases with fp16 outputs (its shapes, warps, operand orders and
   epilogues): wgmma `.f16.f16.f16` where the warpgroups fit, else mma.sync
   `m16n8k16.row.col.f16.f16.f16.f16`, no fp32 accumulator, every kernel assembled by ptxas.
2. A K loop carrying an fp16 accumulator: its f16x2 words are the loop's phis (no packing in the
   loop), and the wgmma stays in flight across iterations as an fp32 one does.
3. Interpret mode accumulates in fp16 too.
"""
from __future__ import annotations

import re

import pytest

import compiler as triton
from compiler import ptxas
from compiler.ptxas import require as find_ptxas
from tests.compiler.kernels import dot_precisions as LK
from tests.compiler.kernels import f16_acc as K
from tests.compiler.test_ptx import ptx_loops

find_ptxas()  # CI installs ptxas: without it these tests must fail, not skip

# Triton's test_dot check for fp16 outputs on sm_80+ (its regex, verbatim)
TRITON_F16_ACC = r'[mma|wgmma.mma_async].sync.aligned.m\d+n\d+k16(?:.row.col)?.f16.f16.f16'
F16_MMA = "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"
F16_WGMMA = r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f16\.f16\.f16 "
F32_ACC = r"(mma\.sync\.aligned\.m16n8k16\.row\.col\.f32|wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32)\."

# Triton's test_dot shapes with fp16 outputs: (M, N, K, num_warps, wgmma instruction N or None)
MIXED = [(128, 256, 32, 8, 256), (128, 16, 32, 4, 16), (32, 128, 64, 4, None), (128, 128, 64, 4, 128),
         (64, 128, 128, 4, 128), (32, 128, 64, 2, None), (64, 64, 32, 4, 64), (32, 32, 128, 16, None),
         (128, 128, 64, 2, None), (64, 128, 128, 2, None)]
BASE = [(64, 64, 64, 4, 64), (32, 32, 32, 4, None), (16, 16, 16, 4, None)]
EPILOGUES = ["none", "trans", "add-matrix", "add-rows", "add-cols", "chain-dot"]

TILE_SIG = dict(X="*fp16", stride_xm="i32", stride_xk="i32", Y="*fp16", stride_yk="i32", stride_yn="i32",
                W="*fp16", stride_wn="i32", stride_wl="i32", Z="*fp16", stride_zm="i32", stride_zn="i32")
LOOP_SIG = dict(A="*fp16", B="*fp16", C="*fp16", M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
                stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32")


def epilogue_flags(epilogue: str) -> dict:
    return dict(ADD_MATRIX=epilogue == "add-matrix", ADD_ROWS=epilogue == "add-rows", ADD_COLS=epilogue == "add-cols",
                CHAIN_DOT=epilogue == "chain-dot")


def compile_tile(M, N, Kd, nw, col_a=False, col_b=False, epilogue="none"):
    """Triton's test_dot kernel as its launch specializes it: unit strides equal to 1, the others
    divisible by 16."""
    ones = ("stride_xm" if col_a else "stride_xk", "stride_yk" if col_b else "stride_yn", "stride_wl",
            "stride_zm" if epilogue == "trans" else "stride_zn")
    return triton.compile(K.f16_dot_kernel, signature=TILE_SIG, num_warps=nw, target="sm_90a",
                          constexprs=dict(BM=M, BN=N, BK=Kd, **epilogue_flags(epilogue)),
                          divisible_by_16=tuple(n for n in TILE_SIG if n not in ones), equal_to_1=ones)


def compile_loop(bm, bn, bk, nw, stages=3):
    ones = ("stride_ak", "stride_bn", "stride_cn")
    """dot_precisions' K loop with fp16 pointers: its `acc` (tl.zeros of C's type) is fp16."""
    return triton.compile(LK.loop_dot_kernel, signature=LOOP_SIG, constexprs=dict(BM=bm, BN=bn, BK=bk, PREC="ieee"),
                          num_warps=nw, num_stages=stages, target="sm_90a", equal_to_1=ones,
                          divisible_by_16=tuple(n for n in LOOP_SIG if n not in ones))


def assembles(ptx: str) -> str:
    rep = ptxas.report(ptx, "sm_90a")
    assert int(re.search(r"(\d+) bytes spill stores", rep).group(1)) == 0, rep
    return rep


def check_f16_accumulator(ptx: str, inst_n) -> None:
    """Triton's regex matches; the instruction is the expected one, with no fp32 accumulator."""
    assert re.search(TRITON_F16_ACC, ptx)
    assert not re.search(F32_ACC, ptx)
    if inst_n is None:
        assert F16_MMA in ptx and "wgmma" not in ptx
    else:
        assert set(re.findall(F16_WGMMA, ptx)) == {str(inst_n)} and "mma.sync" not in ptx


# ---- 1. Triton's test_dot cases ---------------------------------------------------------------------

@pytest.mark.parametrize("M,N,Kd,nw,inst_n", MIXED)
@pytest.mark.parametrize("col_a,col_b", [(False, False), (True, False), (False, True), (True, True)])
def test_mixed_sizes_accumulate_in_f16(M, N, Kd, nw, inst_n, col_a, col_b):
    ptx = compile_tile(M, N, Kd, nw, col_a, col_b).asm["ptx"]
    check_f16_accumulator(ptx, inst_n)
    if M * N // (nw * 32) >= 4:   # Triton's test_dot also wants vectorized global loads and stores
        assert "ld.global.v4" in ptx and "st.global.v4" in ptx
    assembles(ptx)


@pytest.mark.parametrize("M,N,Kd,nw,inst_n", BASE)
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_epilogues_accumulate_in_f16(M, N, Kd, nw, inst_n, epilogue):
    ptx = compile_tile(M, N, Kd, nw, epilogue=epilogue).asm["ptx"]
    check_f16_accumulator(ptx, inst_n)
    if epilogue == "chain-dot":   # both dots
        found = re.findall(F16_WGMMA, ptx) if inst_n else re.findall(re.escape(F16_MMA), ptx)
        assert len(found) >= 2 * (Kd // 16 if Kd == N else 1)
    if M * N // (nw * 32) >= 4:
        assert "ld.global.v4" in ptx and "st.global.v4" in ptx
    assembles(ptx)


@pytest.mark.parametrize("M,N,Kd,nw", [(64, 64, 64, 4), (128, 128, 64, 4), (128, 256, 32, 8)])
def test_f16_accumulator_on_mma_sync_when_wgmma_is_off(monkeypatch, M, N, Kd, nw):
    monkeypatch.setenv("BLOCKTUNE_WGMMA", "0")
    ptx = compile_tile(M, N, Kd, nw, epilogue="chain-dot").asm["ptx"]
    check_f16_accumulator(ptx, None)
    assembles(ptx)


def test_f16_accumulator_holds_half_the_registers():
    """An fp16 accumulator's m64n128 wgmma writes 32 f16x2 registers, an fp32 one's 64."""
    ptx = compile_tile(128, 128, 64, 4).asm["ptx"]
    inst = re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f16\.f16\.f16 \{([^}]*)\}", ptx)
    assert len(inst.group(1).split(",")) == 32
    assert all(r.strip().startswith("%r") for r in inst.group(1).split(","))


def test_f16_dot_without_acc_starts_from_zero():
    """A dot without `acc` (fp16 zeros) starts each row block's wgmma chain with scale-d 0 (no
    zeroed registers read), as an fp32 one does; the chained dot's A comes straight from the first
    dot's f16x2 accumulator words."""
    ptx = compile_tile(64, 64, 64, 4, epilogue="chain-dot").asm["ptx"]
    insts = re.findall(r"wgmma\.mma_async[^;]*;", ptx)
    starts = [i for i in insts if re.search(r", 0, 1, 1(, [01]){1,2};$", i)]
    assert len(insts) == 8 and len(starts) == 2
    first_out = re.search(r"\{([^}]*)\}", insts[0]).group(1).split(", ")
    a_regs = re.findall(r"\}, \{([^}]*)\}", insts[4])[0].split(", ")
    assert a_regs == first_out[:4]


# ---- 2. K loops -------------------------------------------------------------------------------------

@pytest.mark.parametrize("bm,bn,bk,nw,mode", [(128, 128, 64, 4, "async"), (128, 256, 64, 8, "async"),
                                              (64, 64, 32, 4, "async"), (64, 64, 32, 2, "mma"),
                                              (128, 128, 64, 4, "mma-off")])
def test_f16_accumulator_stays_packed_in_the_loop(monkeypatch, bm, bn, bk, nw, mode):
    """The loop carries the accumulator in the f16x2 words the instructions use (no mov.b32 packing
    halves in the loop: written between wgmma.fence and the wgmmas, ptxas would also make them wait);
    on wgmma it stays in flight across iterations (wait_group 1), as an fp32 accumulator does."""
    if mode == "mma-off":
        monkeypatch.setenv("BLOCKTUNE_WGMMA", "0")
    ptx = compile_loop(bm, bn, bk, nw).asm["ptx"]
    loops = [lp for lp in ptx_loops(ptx) if "mma" in lp]
    assert len(loops) == 1
    loop = loops[0]
    assert not re.search(r"mov\.b32\s+%r\d+, \{%rs", loop) and not re.search(r"mov\.b32\s+\{%rs", loop)
    if mode == "async":
        assert re.search(F16_WGMMA, loop) and re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", loop)
    else:
        assert F16_MMA in loop
    assert not re.search(F32_ACC, ptx)
    rep = assembles(ptx)
    assert "C7515" not in rep and "C7519" not in rep, rep


# ---- 3. interpret mode ------------------------------------------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")


def run_tile_interpreted(x, y, w, z, epilogue="none"):
    M, Kd = x.shape
    N = y.shape[1]
    K.f16_dot_kernel[(1,)](x, x.stride(0), x.stride(1), y, y.stride(0), y.stride(1), w, w.stride(0), w.stride(1),
                           z, z.stride(0), z.stride(1), BM=M, BN=N, BK=Kd, **epilogue_flags(epilogue))


def test_interpret_rounds_the_accumulator_to_f16(interpret):
    """Each k16 step's sum goes into an fp16 accumulator: 2048 + 1 + 1 + 1 stays 2048 (each +1 is a
    tie, rounded to even), where one rounding of the fp32 sum 2051 gives 2052."""
    x = torch.zeros((16, 64), dtype=torch.float16)
    x[:, 0], x[:, 16], x[:, 32], x[:, 48] = 2048, 1, 1, 1
    y = torch.ones((64, 16), dtype=torch.float16)
    z = torch.full((16, 16), float("nan"), dtype=torch.float16)
    run_tile_interpreted(x, y, y, z)
    assert torch.equal(z, torch.full((16, 16), 2048.0, dtype=torch.float16))


def f16_accumulation_bound(x, y, c=None):
    """How far x @ y + c accumulated in fp16 (each k16 step's sum added to the fp16 accumulator) may
    be from the exact value, whatever the order and rounding of the sums: an ulp of each step's
    partial sum (at most ULP times it, for the exact partial sums; twice that for the errors carried
    along), plus an ulp of the products' magnitude for the sum inside a step."""
    acc = c.double() if c is not None else torch.zeros((x.shape[0], y.shape[1]), dtype=torch.float64, device=x.device)
    seen = torch.zeros_like(acc)
    for k0 in range(0, x.shape[1], 16):
        acc = acc + x[:, k0:k0 + 16].double() @ y[k0:k0 + 16].double()
        seen += acc.abs()
    return 2 * ULP * seen + ULP * (x.double().abs() @ y.double().abs()) + 2 ** -24


ULP = 2 ** -10   # fp16's relative spacing (an ulp of v is at most ULP * |v|)


def f16_accumulated(x, y, c):
    """The fp16-accumulator model in float64 (each k16 chunk's exact sum added, then rounded to fp16)
    and f16_accumulation_bound for x, y, c: a sum of the same products in another order within a
    chunk (the interpreter's fp32 one, the tensor cores') stays within it."""
    acc = c.double()
    for k0 in range(0, x.shape[1], 16):
        acc = (acc + x[:, k0:k0 + 16].double() @ y[k0:k0 + 16].double()).half().double()
    return acc, f16_accumulation_bound(x, y, c)


@pytest.mark.parametrize("epilogue", ["none", "add-matrix", "chain-dot"])
def test_interpret_matches_the_f16_accumulator_model(interpret, epilogue):
    g = torch.Generator().manual_seed(23)
    M, N, Kd = 32, 64, 64
    x = (torch.randn((M, Kd), generator=g) * 0.5).half()
    y = (torch.randn((Kd, N), generator=g) * 0.5).half()
    w = (torch.randn((N, N), generator=g) * 0.5).half()
    z0 = (1 + 0.1 * torch.randn((M, N), generator=g)).half()
    z = z0.clone()
    run_tile_interpreted(x, y, w, z, epilogue)
    zeros = torch.zeros((M, N), dtype=torch.float16)
    want, tol = f16_accumulated(x, y, zeros)
    if epilogue == "add-matrix":
        want, tol = (want + z0.double()).half().double(), tol + ULP * (want.abs() + z0.double().abs())
    if epilogue == "chain-dot":
        want2, tol2 = f16_accumulated(want.half(), w, zeros)
        want, tol = want2, tol2 + tol @ w.double().abs()
    assert ((z.double() - want).abs() <= tol).all()
    # and fp16 accumulation is visible: the exact product rounded once is further off somewhere
    exact = x.double() @ y.double()
    if epilogue == "none":
        assert not torch.equal(z, exact.half())


def test_interpret_f16_loop_accumulates_in_f16(interpret):
    g = torch.Generator().manual_seed(29)
    M, N, Kd = 48, 40, 96
    a, b = (torch.randn((M, Kd), generator=g) * 0.3).half(), (torch.randn((Kd, N), generator=g) * 0.3).half()
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    LK.loop_dot_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, Kd, a.stride(0), a.stride(1),
                                                                 b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                                                 BM=32, BN=32, BK=32, PREC="ieee")
    want, tol = f16_accumulated(a, b, torch.zeros((M, N)))
    assert ((c.double() - want).abs() <= tol).all()
