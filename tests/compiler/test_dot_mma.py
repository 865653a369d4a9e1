"""tl.dot on tensor cores (compiler/backend/mma.py), without a GPU.

1. The layout math, executed: `tensor_core_model.mma_sim` runs the lowering's shared-memory swizzle, ldmatrix
   lane addresses, fragment tables (PTX ISA) and accumulator layout on numpy and must give A @ B + C
   exactly, with no ldmatrix bank conflicts, for every operand order, shape and warp count.
2. PTX: every dtype / operand order / block shape / num_warps compiles, uses mma.sync (+ ldmatrix
   where it applies) and assembles with ptxas for sm_80 and sm_90 without spills.
3. Interpret mode: tl.dot in every dtype/shape/transpose combination and Triton's tutorial 03
   (bench/matmul_kernels.py, loaded with only its import lines changed) against torch in float64.
"""
from __future__ import annotations

import importlib.util
import itertools
import math
import pathlib
import re
import sys

import numpy as np
import pytest
try:
    import torch
except ImportError:     # the PTX and layout tests need none; the interpret-mode ones compare with torch
    torch = None
requires_torch = pytest.mark.skipif(torch is None, reason="compares tl.dot with torch's matmul (torch not installed)")

from compiler import ptxas
from compiler.backend import dot_layouts, nvptx
from compiler.ptxas import require as find_ptxas

import compiler as triton
import dot_kernels as DK
import tensor_core_model

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _mma_sync_by_default(monkeypatch):
    """These tests pin the code-generation switches (the wgmma tests turn wgmma on themselves)."""
    monkeypatch.setenv("BLOCKTUNE_WGMMA", "0")  # mma.sync unless a test turns wgmma on
    monkeypatch.delenv("BLOCKTUNE_NO_PIPELINE", raising=False)

find_ptxas()  # CI installs ptxas (the nvidia-cuda-nvcc wheel): without it these tests fail, not skip


# ---- 1. layout math --------------------------------------------------------------------------------

SIM_CASES = [  # (kind, M, N, K, num_warps)
    ("f16", 16, 16, 16, 1), ("f16", 64, 64, 32, 4), ("f16", 128, 64, 64, 4), ("f16", 32, 16, 16, 8),
    ("f16", 16, 64, 32, 4), ("f16", 64, 32, 128, 2), ("f16", 16, 16, 32, 2), ("f16", 64, 128, 16, 8),
    ("tf32", 16, 16, 16, 1), ("tf32", 64, 32, 32, 4), ("tf32", 32, 64, 16, 2), ("tf32", 16, 32, 64, 8),
]


@pytest.mark.parametrize("kind,M,N,K,nw", SIM_CASES)
@pytest.mark.parametrize("a_cdim,b_cdim", list(itertools.product((0, 1), (0, 1))))
def test_fragment_simulation(kind, M, N, K, nw, a_cdim, b_cdim):
    rng = np.random.default_rng(M * 7 + N * 3 + K + nw)
    A = rng.integers(-4, 5, (M, K)).astype(float)
    B = rng.integers(-4, 5, (K, N)).astype(float)
    C = rng.integers(-4, 5, (M, N)).astype(float)
    D, conflicts = tensor_core_model.mma_sim(A, B, C, nw, kind, a_cdim, b_cdim)
    np.testing.assert_array_equal(D, A @ B + C)
    assert conflicts == 0, f"{conflicts} extra ldmatrix wavefronts (bank conflicts)"


@pytest.mark.parametrize("M,N,nw", [(16, 16, 1), (16, 16, 8), (128, 256, 8), (64, 32, 4), (256, 16, 4), (32, 128, 2)])
def test_acc_layout_covers_block(M, N, nw):
    lay = dot_layouts.mma_acc_layout(M, N, nw)
    seen = {}
    for w in range(nw):
        for lane in range(32):
            for r in range(lay.n_regs):
                c = lay.coord(r, lane, w)
                seen[c] = seen.get(c, 0) + 1
    assert set(seen) == set(itertools.product(range(M), range(N)))
    assert len(set(seen.values())) == 1  # uniform replication (only when warps outnumber 16×16 tiles)
    wm, wn = dot_layouts.warps_per_tile(M, N, nw)
    assert M % (16 * wm) == 0 and N % (16 * wn) == 0


def test_swizzle_is_bijective_and_xor_linear():
    for shape, cdim, es in [((64, 32), 1, 2), ((32, 64), 0, 2), ((16, 16), 1, 4), ((128, 16), 1, 2), ((16, 256), 1, 2)]:
        t = dot_layouts.SmemTile(shape, cdim, es)
        offs = {t.offset(c) for c in itertools.product(range(shape[0]), range(shape[1]))}
        assert offs == set(range(shape[0] * shape[1]))
        for _ in range(50):
            c1 = (np.random.randint(shape[0]), np.random.randint(shape[1]))
            c2 = (np.random.randint(shape[0]), np.random.randint(shape[1]))
            assert t.offset((c1[0] ^ c2[0], c1[1] ^ c2[1])) == t.offset(c1) ^ t.offset(c2)


# ---- 2. PTX -------------------------------------------------------------------------------------------

SIG = dict(A="*fp16", B="*fp16", C="*fp16", D="*fp32", M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
           stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32", stride_dm="i32", stride_dn="i32")
DIV = ("A", "B", "C", "D", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn",
       "stride_dm", "stride_dn")


def compile_dot(dt, bm, bn, bk, nw, trans_a=0, trans_b=0, prec="tf32", col_a=False, col_b=False, target="sm_90", out="fp32"):
    """col_a: A is column-major (stride_am == 1, so M is contiguous); likewise col_b (K contiguous)."""
    sig = dict(SIG, A=f"*{dt}", B=f"*{dt}", C=f"*{dt}", D=f"*{out}")
    ones = ["stride_am" if col_a else "stride_ak", "stride_bk" if col_b else "stride_bn", "stride_cn", "stride_dn"]
    div = tuple(n for n in DIV if n not in ones)
    return triton.compile(DK.dot_kernel, signature=sig, constexprs=dict(BM=bm, BN=bn, BK=bk, TRANS_A=trans_a, TRANS_B=trans_b,
                                                                         PREC=prec, HAS_C=True),
                          num_warps=nw, target=target, divisible_by_16=div, equal_to_1=tuple(ones))


def report(ptx, arch):
    rep = ptxas.report(ptx, arch)
    return int(re.search(r"Used (\d+) registers", rep).group(1)), int(re.search(r"(\d+) bytes spill stores", rep).group(1)), rep


PTX_CASES = [  # dt, bm, bn, bk, nw, trans_a, trans_b, col_a, col_b
    ("fp16", 16, 16, 16, 1, 0, 0, False, False),
    ("fp16", 64, 64, 32, 4, 0, 0, False, False),
    ("fp16", 128, 128, 32, 4, 0, 0, False, False),
    ("fp16", 64, 32, 64, 8, 1, 0, False, False),
    ("fp16", 32, 64, 32, 2, 0, 1, False, False),
    ("fp16", 64, 64, 16, 4, 1, 1, False, False),
    ("fp16", 64, 64, 32, 4, 0, 0, True, True),
    ("fp16", 16, 256, 32, 4, 0, 0, False, False),
    ("fp16", 256, 16, 16, 8, 0, 0, False, False),
    ("bf16", 64, 64, 32, 4, 0, 0, False, False),
    ("bf16", 32, 32, 64, 2, 1, 1, False, False),
    ("fp32", 32, 32, 16, 4, 0, 0, False, False),
    ("fp32", 64, 32, 32, 4, 1, 1, False, False),
    ("fp32", 16, 64, 16, 2, 0, 1, False, False),
]


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", PTX_CASES, ids=["-".join(map(str, c)) for c in PTX_CASES])
def test_dot_ptx_assembles(case, target):
    dt, bm, bn, bk, nw, ta, tb, ca, cb = case
    ck = compile_dot(dt, bm, bn, bk, nw, ta, tb, col_a=ca, col_b=cb, target=target)
    ptx = ck.asm["ptx"]
    shape = "m16n8k8" if dt == "fp32" else "m16n8k16"
    kind = {"fp16": "f16.f16", "bf16": "bf16.bf16", "fp32": "tf32.tf32"}[dt]
    assert f"mma.sync.aligned.{shape}.row.col.f32.{kind}.f32" in ptx
    n_mma = ptx.count("mma.sync.aligned")
    wm, wn = dot_layouts.warps_per_tile(bm, bn, nw)
    assert n_mma == (bm // wm // 16) * (bn // wn // 8) * (bk // (8 if dt == "fp32" else 16))
    a_k_contig = not (ta or ca)
    b_k_contig = bool(tb or cb)
    if dt != "fp32" or a_k_contig or b_k_contig:
        assert "ldmatrix.sync.aligned.m8n8" in ptx
    if dt != "fp32" and not (a_k_contig and b_k_contig):
        assert ".trans.shared.b16" in ptx
    if dt == "fp32":
        assert "cvt.rna.tf32.f32" in ptx
    regs, spills, rep = report(ptx, target)
    assert spills == 0, rep
    assert ".local" not in ptx


def test_ieee_fp32_stays_on_fma():
    ck = compile_dot("fp32", 32, 32, 16, 4, prec="ieee")
    ptx = ck.asm["ptx"]
    assert "mma.sync" not in ptx and "fma.rn.f32" in ptx
    report(ptx, "sm_90")


# ---- the tutorial: every autotune config compiles, uses mma.sync, assembles ---------------------------

def load_tutorial():
    """bench/matmul_kernels.py with only the import lines changed (as the benchmark loads it)."""
    from tests.compiler.kernels import bench_kernels
    return bench_kernels("matmul_kernels.py")


TUT_SIG = dict(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", M="i32", N="i32", K="i32", stride_am="i32", stride_ak="i32",
               stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32")
TUT_DIV = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")
TUT_ONES = ("stride_ak", "stride_bn", "stride_cn")


@pytest.mark.parametrize("i", range(16))
def test_tutorial_configs_assemble(i):
    mod = load_tutorial()
    cfgs = mod.get_autotune_config()
    cfg = cfgs[i]
    ck = triton.compile(mod.matmul_kernel.fn, signature=TUT_SIG, constexprs=dict(cfg.kwargs, ACTIVATION="leaky_relu"),
                        num_warps=cfg.num_warps, num_stages=cfg.num_stages, target="sm_90", divisible_by_16=TUT_DIV,
                        equal_to_1=TUT_ONES)
    ptx = ck.asm["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "ldmatrix" in ptx
    regs, spills, rep = report(ptx, "sm_90")
    if cfg.kwargs["BLOCK_SIZE_K"] < 128:  # BLOCK_K=128 tiles staged through registers spill (until cp.async)
        assert spills == 0, rep
    assert ck.metadata["shared"] <= 227 * 1024


# ---- software pipelining (compiler/backend/pipeline.py) --------------------------------------------

def backend_ptx(kern, sig, cx, nw, stages, div, ones):
    """Front end + backend without the runtime's caches (the pipeline switch is an env var)."""
    from compiler.runtime.compile import build_ir
    fn = build_ir(kern, sig, cx, div, ones)
    return nvptx.compile_ir(fn, num_warps=nw, num_stages=stages, target="sm_90")


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5])
def test_tutorial_pipelined(stages, monkeypatch):
    mod = load_tutorial()
    cx = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION="")
    out = backend_ptx(mod.matmul_kernel.fn, TUT_SIG, cx, 4, stages, TUT_DIV, TUT_ONES)
    ptx = out["ptx"]
    if stages == 1:
        assert "cp.async" not in ptx and "ld.global.v4.b32" in ptx
    else:
        # a group per tile (A, B), as Triton's: S-1 stages in the prologue, one per iteration; wait
        # until one stage has landed (Triton's count: 2 (S-2), e.g. 6 for num_stages=5)
        assert ptx.count("cp.async.commit_group") == 2 * stages
        assert re.search(rf"cp\.async\.wait_group\s+{2 * (stages - 2)};", ptx)
        assert re.search(r"cp\.async\.wait_group\s+0;", ptx)
        assert "cp.async.cg.shared.global" in ptx and "ld.global" not in ptx.split("cp.async.commit_group")[0].split(".entry")[1]
        assert out["shared"] == stages * (128 * 32 * 2 * 2)
    regs, spills, rep = report(ptx, "sm_90")
    assert spills == 0, rep
    monkeypatch.setenv("BLOCKTUNE_NO_PIPELINE", "1")
    assert "cp.async" not in backend_ptx(mod.matmul_kernel.fn, TUT_SIG, cx, 4, stages, TUT_DIV, TUT_ONES)["ptx"]


def test_pipeline_narrow_copies_and_fallbacks():
    sig = dict(SIG, A="*fp16", B="*fp16", C="*fp16", D="*fp32")
    cx = dict(BM=64, BN=64, BK=32, TRANS_A=0, TRANS_B=0, PREC="tf32", HAS_C=True)
    ones = ("stride_ak", "stride_bn", "stride_cn", "stride_dn")
    # aligned rows, K a multiple of 16: 16-byte copies
    div = ("A", "B", "C", "D", "M", "N", "K", "stride_am", "stride_bk", "stride_cm", "stride_dm")
    ptx = backend_ptx(DK.dot_kernel, sig, cx, 4, 3, div, ones)["ptx"]
    assert "cp.async.cg.shared.global" in ptx
    report(ptx, "sm_90")
    # A's rows not 16-byte aligned and K unknown: 2-byte accesses cannot be cp.async'ed → register path
    div = ("A", "B", "C", "D", "stride_bk", "stride_cm", "stride_dm")
    ptx = backend_ptx(DK.dot_kernel, sig, cx, 4, 3, div, ones)["ptx"]
    assert "cp.async" not in ptx and "mma.sync" in ptx
    report(ptx, "sm_90")
    # tl.trans operands and tf32 stay on the register path
    ptx = backend_ptx(DK.dot_kernel, sig, dict(cx, TRANS_A=1), 4, 3, DIV[:4] + DIV[7:], ("stride_am", "stride_bn", "stride_cn", "stride_dn"))["ptx"]
    assert "mma.sync" in ptx
    report(ptx, "sm_90")


# ---- SASS (when nvdisasm is installed: PATH, $BLOCKTUNE_NVDISASM, or the nvidia-cuda-nvdisasm wheel) ---

def _nvdisasm():
    import os
    import shutil
    cands = [os.environ.get("BLOCKTUNE_NVDISASM"), shutil.which("nvdisasm")]
    try:
        import nvidia.cu13 as cu  # type: ignore
        cands += [os.path.join(b, "bin", "nvdisasm") for b in cu.__path__]
    except ImportError:
        pass
    return next((c for c in cands if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


@pytest.mark.skipif(_nvdisasm() is None, reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tutorial_sass(arch, tmp_path):
    """HMMA from mma.sync, LDSM from ldmatrix, LDGSTS from cp.async, and no local memory."""
    import subprocess
    mod = load_tutorial()
    cx = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION="leaky_relu")
    from compiler.runtime.compile import build_ir
    out = nvptx.compile_ir(build_ir(mod.matmul_kernel.fn, TUT_SIG, cx, TUT_DIV, TUT_ONES), num_warps=4, num_stages=4, target=arch)
    (tmp_path / "k.ptx").write_text(out["ptx"])
    subprocess.run([find_ptxas(), f"-arch={arch}", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")], check=True)
    sass = subprocess.run([_nvdisasm(), "-c", str(tmp_path / "k.cubin")], check=True, capture_output=True, text=True).stdout
    assert sass.count("HMMA.16816.F32") == 64
    assert "LDSM.16.M88.4" in sass and "LDSM.16.MT88.4" in sass
    assert "LDGSTS" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass), "local memory in the kernel"


# ---- 3. interpret mode ----------------------------------------------------------------------------------

TD = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32} if torch is not None else {}
# relative-norm tolerance per input precision (K ≤ 256, inputs ~N(0,1), fp32 output)
RTOL = {"fp16": 1e-3, "bf16": 8e-3, "tf32": 2e-3, "ieee": 1e-5}


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "NaN left in the output"
    return ((out - ref).norm() / ref.norm()).item()


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def run_dot(dt, M, N, Kd, bm, bn, bk, trans_a, trans_b, prec, device="cpu", nw=4, col_a=False, col_b=False, g=None,
            num_stages=3):
    t = TD[dt]
    a = torch.randn(M, Kd, generator=g, device=device).to(t)
    b = torch.randn(Kd, N, generator=g, device=device).to(t)
    if col_a:
        a = a.t().contiguous().t()
    if col_b:
        b = b.t().contiguous().t()
    c = torch.randn(M, N, generator=g, device=device).to(t)
    d = torch.full((M, N), float("nan"), device=device)
    grid = (math.ceil(M / bm), math.ceil(N / bn))
    # TRANS_A: the kernel reads A's tile as [BK, BM] through the same strides, then tl.trans
    DK.dot_kernel[grid](a, b, c, d, M, N, Kd, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        d.stride(0), d.stride(1), BM=bm, BN=bn, BK=bk, TRANS_A=trans_a, TRANS_B=trans_b, PREC=prec,
                        HAS_C=True, num_warps=nw, num_stages=num_stages)
    ref = a.double() @ b.double() + c.double()
    tol = RTOL[dt] if dt != "fp32" else RTOL["ieee" if prec == "ieee" else "tf32"]
    return rel_err(d, ref), tol


INTERP_CASES = [(dt, prec, bm, bn, bk) for dt, prec in [("fp16", "tf32"), ("bf16", "tf32"), ("fp32", "tf32"), ("fp32", "ieee")]
                for bm, bn, bk in [(16, 16, 16), (32, 64, 16), (64, 16, 32)]]


@requires_torch
@pytest.mark.parametrize("dt,prec,bm,bn,bk", INTERP_CASES)
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_dot_interpret(interpret, dt, prec, bm, bn, bk, trans_a, trans_b):
    g = torch.Generator().manual_seed(bm * 131 + bn * 7 + bk + trans_a * 3 + trans_b)
    err, tol = run_dot(dt, 37, 45, 50, bm, bn, bk, trans_a, trans_b, prec, g=g)
    assert err < tol, err


@requires_torch
def test_dot_out_dtype_and_allow_tf32_interpret(interpret):
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(32, 16, generator=g).half(), torch.randn(16, 64, generator=g).half()
    d = torch.full((32, 64), float("nan"), dtype=torch.float16)
    DK.dot_out_dtype_kernel[(1,)](a, b, d, BM=32, BN=64, BK=16, ALLOW_TF32=True)
    assert rel_err(d, a.double() @ b.double()) < 2e-3
    a, b = torch.randn(32, 16, generator=g), torch.randn(16, 64, generator=g)
    d = torch.full((32, 64), float("nan"))
    DK.dot_out_dtype_kernel[(1,)](a, b, d, BM=32, BN=64, BK=16, ALLOW_TF32=False)
    assert rel_err(d, a.double() @ b.double()) < 1e-6
    DK.dot_out_dtype_kernel[(1,)](a, b, d, BM=32, BN=64, BK=16, ALLOW_TF32=True)
    e = rel_err(d, a.double() @ b.double())
    assert 1e-6 < e < 2e-3  # tf32 rounding is visible, and small


@requires_torch
@pytest.mark.parametrize("M,N,K", [(100, 70, 50), (64, 64, 64), (16, 48, 80)])
@pytest.mark.parametrize("activation", ["", "leaky_relu"])
def test_tutorial_interpret(interpret, M, N, K, activation):
    mod = load_tutorial()
    kern = mod.matmul_kernel
    kern.configs = [c for c in mod.get_autotune_config() if c.kwargs["BLOCK_SIZE_M"] <= 64 and c.kwargs["BLOCK_SIZE_N"] <= 64][:2]
    kern.cache.clear()
    g = torch.Generator().manual_seed(M + N + K)
    a, b = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    c = mod.matmul(a, b, activation)
    ref = a.double() @ b.double()
    if activation:
        ref = torch.where(ref >= 0, ref, 0.01 * ref)
    assert rel_err(c, ref) < 2e-3
    assert kern.best_config in kern.configs


# ---- wgmma (sm_90a, BLOCKTUNE_WGMMA=1) ----------------------------------------------------------------

from compiler.backend import wgmma  # noqa: E402


@pytest.mark.parametrize("m,n,nw", [(64, 64, 4), (128, 256, 8), (128, 128, 4), (256, 128, 8), (128, 32, 4), (64, 256, 4),
                                    (64, 128, 8)])
def test_wgmma_acc_layout_matches_fragment_table(m, n, nw):
    """Register i of instruction `rep` on (warp, lane) holds D[row, col] per the PTX table for
    wgmma.m64nNk16 f32: row = 16·(warp % 4) + lane/4 + 8·(i/2 % 2), col = 8·(i/4) + 2·(lane % 4) + i % 2,
    offset by the warpgroup's and the repetition's block."""
    wg_m, wg_n, tn, reps = dot_layouts.wgmma_config(m, n, nw)
    lay = dot_layouts.wgmma_acc_layout(m, n, nw)
    per = tn // 2
    seen = set()
    for w in range(nw):
        wg = w // 4
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for rep in range(reps):
                for i in range(per):
                    row = 64 * (wg % wg_m) + 64 * wg_m * rep + 16 * (w % 4) + g + 8 * ((i >> 1) & 1)
                    col = (wg // wg_m) * tn + 8 * (i >> 2) + 2 * t + (i & 1)
                    assert lay.coord(rep * per + i, lane, w) == (row, col)
                    seen.add((row, col))
    assert len(seen) == m * n


@pytest.mark.parametrize("shape,cdim,mn_major", [((128, 64), 1, False), ((64, 32), 1, False), ((128, 128), 1, False),
                                                 ((64, 256), 1, True), ((32, 128), 1, True), ((64, 128), 0, True),
                                                 ((16, 64), 0, False), ((64, 64), 0, False)])
def test_wgmma_descriptors_read_the_tile(shape, cdim, mn_major):
    """Write a tile the way the lowering does (SmemTile with panels), build the descriptor of each
    instruction's operand slice the way wgmma.dot_from_tiles does, and read it back per the
    canonical layouts + address swizzle: the slice must come out exactly.

    shape is the operand's [rows-or-K, …] as stored: for A (m, k) or B (k, n); `mn_major` says the
    contiguous dim is M/N (imm-trans = 1)."""
    es = 2
    base = 2048
    t = dot_layouts.SmemTile(shape, cdim, es, base=base, panels=True)
    smem = np.full((base + t.nbytes) // es, np.nan)
    vals = np.arange(shape[0] * shape[1], dtype=float).reshape(shape)
    for i in range(shape[0]):
        for j in range(shape[1]):
            smem[(base + t.offset((i, j)) * es) // es] = vals[i, j]
    dconst = wgmma.descriptor_const(t)
    # which dim is K: the one that is contiguous unless MN-major
    kdim = 1 - cdim if mn_major else cdim
    mndim = 1 - kdim
    for mn0 in range(0, shape[mndim], 64):
        for k0 in range(0, shape[kdim], 16):
            coord = [0, 0]
            coord[mndim], coord[kdim] = mn0, k0
            addr = base + t.offset(tuple(coord)) * es
            desc = dconst | ((addr >> 4) & 0x3FFF)
            rows = min(64, shape[mndim])
            got = tensor_core_model.read_through_descriptor(smem, desc, rows, 16, es, mn_major)
            want = vals[mn0:mn0 + rows, k0:k0 + 16] if mndim == 0 else vals[k0:k0 + 16, mn0:mn0 + rows].T
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("pointer_tma", ["1", "0"])
@pytest.mark.parametrize("i", range(16))
def test_wgmma_tutorial_configs(i, pointer_tma, monkeypatch):
    """BLOCKTUNE_WGMMA=1 on sm_90: every tutorial config with ≥ 4 warps and ≥ 64 rows uses wgmma
    (sm_90a), fed by bulk tensor copies (pointer tiles through TMA, the default) or, with
    BLOCKTUNE_POINTER_TMA=0, by the cp.async pipeline, and assembles without spills."""
    monkeypatch.setenv("BLOCKTUNE_WGMMA", "1")
    monkeypatch.setenv("BLOCKTUNE_POINTER_TMA", pointer_tma)
    mod = load_tutorial()
    cfg = mod.get_autotune_config()[i]
    kw = cfg.kwargs
    out = backend_ptx(mod.matmul_kernel.fn, TUT_SIG, dict(kw, ACTIVATION="leaky_relu"), cfg.num_warps, cfg.num_stages,
                      TUT_DIV, TUT_ONES)
    ptx = out["ptx"]
    expect = dot_layouts.wgmma_config(kw["BLOCK_SIZE_M"], kw["BLOCK_SIZE_N"], cfg.num_warps)
    if expect is None:
        assert "wgmma" not in ptx and out["target"] == "sm_90"
        return
    wg_m, wg_n, tn, reps = expect
    assert out["target"] == "sm_90a"
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{tn}k16.f32.f16.f16") == reps * kw["BLOCK_SIZE_K"] // 16
    assert "wgmma.fence.sync.aligned" in ptx and "wgmma.commit_group.sync.aligned" in ptx
    assert "wgmma.wait_group.sync.aligned 0" in ptx and "ldmatrix" not in ptx
    if pointer_tma == "1":
        assert "cp.async.bulk.tensor" in ptx and "cp.async.cg.shared.global" not in ptx
    else:   # cp.async-fed: no proxy fence, as Triton
        assert "cp.async.cg.shared.global" in ptx and "fence.proxy.async" not in ptx
    regs, spills, rep = report(ptx, "sm_90a")
    assert spills == 0, rep


@pytest.mark.parametrize("mode,stages", [("1", 3), ("1", 4), ("1", 2), ("sync", 3), ("sync", 4)])
def test_wgmma_async_pipeline(monkeypatch, mode, stages):
    """BLOCKTUNE_WGMMA=1 keeps one wgmma group in flight across iterations (wait_group 1 in the
    loop, 0 at the exit), in Triton's order: the copies of iteration i+S-1 are issued after the
    wgmma of i and a second barrier, S-1 stages ahead, from S = 2 on; =sync waits at each dot
    (S-1 ahead). No proxy fence in the loop (cp.async completes by wait_group + bar.sync, as in
    Triton's PTX). The cp.async path: pointer tiles kept off TMA."""
    monkeypatch.setenv("BLOCKTUNE_WGMMA", mode)
    monkeypatch.setenv("BLOCKTUNE_POINTER_TMA", "0")
    mod = load_tutorial()
    cx = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION="")
    ptx = backend_ptx(mod.matmul_kernel.fn, TUT_SIG, cx, 4, stages, TUT_DIV, TUT_ONES)["ptx"]
    async_ = mode == "1"
    dist = stages - 1
    assert ptx.count("cp.async.commit_group") == 2 * (dist + 1)   # a group per tile
    assert re.search(rf"cp\.async\.wait_group\s+{2 * (dist - 1)};", ptx)
    assert ("wgmma.wait_group.sync.aligned 1;" in ptx) == async_
    assert "wgmma.wait_group.sync.aligned 0;" in ptx
    loop = ptx[ptx.index("wgmma.fence.sync.aligned"):]
    loop = loop[:loop.index("bra")]
    if async_:   # wait(1), then the barrier, then the next copies
        tail = loop[loop.index("wgmma.wait_group.sync.aligned 1;"):]
        assert "bar.sync" in tail and tail.index("bar.sync") < tail.index("cp.async.cg.shared.global")
        assert "cp.async.cg.shared.global" not in loop[:loop.index("wgmma.mma_async")]
    assert "fence.proxy.async" not in loop
    regs, spills, rep = report(ptx, "sm_90a")
    assert spills == 0, rep


@pytest.mark.skipif(_nvdisasm() is None, reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
def test_wgmma_sass(monkeypatch, tmp_path):
    import subprocess
    monkeypatch.setenv("BLOCKTUNE_WGMMA", "1")
    mod = load_tutorial()
    cx = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, ACTIVATION="")
    out = backend_ptx(mod.matmul_kernel.fn, TUT_SIG, cx, 8, 3, TUT_DIV, TUT_ONES)
    (tmp_path / "k.ptx").write_text(out["ptx"])
    subprocess.run([find_ptxas(), "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")], check=True)
    sass = subprocess.run([_nvdisasm(), "-c", str(tmp_path / "k.cubin")], check=True, capture_output=True, text=True).stdout
    assert sass.count("HGMMA.64x256x16.F32") == 4
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass  # one wgmma group left in flight in the loop
    assert not re.search(r"\b(LDL|STL)\b", sass)


def test_wgmma_register_operands_and_transposes(monkeypatch):
    """Operands that are not pipelined (tl.trans, column-major) go through registers into the
    wgmma tiles (K-major or MN-major as they arrive)."""
    monkeypatch.setenv("BLOCKTUNE_WGMMA", "1")
    for ta, tb in [(0, 0), (1, 0), (0, 1), (1, 1)]:
        ones = ("stride_am" if ta else "stride_ak", "stride_bk" if tb else "stride_bn", "stride_cn", "stride_dn")
        sig = dict(SIG, A="*fp16", B="*fp16", C="*fp16", D="*fp32")
        cx = dict(BM=128, BN=128, BK=32, TRANS_A=ta, TRANS_B=tb, PREC="tf32", HAS_C=True)
        div = tuple(n for n in DIV if n not in ones)
        out = backend_ptx(DK.dot_kernel, sig, cx, 4, 3, div, ones)
        ptx = out["ptx"]
        assert "wgmma.mma_async.sync.aligned.m64n128k16" in ptx
        report(ptx, "sm_90a")
