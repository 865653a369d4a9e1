"""`tl.dot` with M or N under 16 on the GPU (Triton's test_dot small-dot cases: [2, 32] @ [32, 4] fp16 and
[1, 32] @ [32, 2] fp8e5, one warp), which the backend refused before: padded onto mma.sync as
Triton's (small_dot.py; the instruction its test_dot looks for: `m16n8k16.row.col.f32.f16.f16.f32`,
fp8 operands as fp16), fp32 "ieee" ones as FMA dots. K keeps Triton's minimum (16, 32 for 8-bit).

PTX (the instruction, assembled by ptxas), interpret mode and (`gpu`) the GPU against torch in
float64."""
from __future__ import annotations

import re

import pytest

import compiler as triton
from compiler import ptxas
from tests.compiler.kernels import small_dots as K
from tests.compiler.test_f16_accumulator import f16_accumulation_bound

torch = pytest.importorskip("torch")

from tests.compiler.kernels.gpu_util import gen  # noqa: E402,F401

# (operand type, result type, M, N, K, num_warps, input_precision, the instruction)
F16_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
CASES = [("fp16", "fp32", 2, 4, 32, 1, "ieee", F16_MMA), ("fp8e5", "fp32", 1, 2, 32, 1, "ieee", F16_MMA),
         ("fp32", "fp32", 4, 64, 16, 1, "tf32", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
         ("fp32", "fp32", 8, 32, 32, 2, "ieee", "fma.rn.f32"), ("fp16", "fp32", 64, 4, 64, 4, "ieee", F16_MMA),
         ("fp16", "fp16", 4, 32, 32, 1, "ieee", "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"),
         ("bf16", "fp32", 8, 8, 16, 4, "ieee", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")]
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp8e5": torch.float8_e5m2}


def compile_small(t, out, M, N, Kd, nw, prec):
    return triton.compile(K.small_dot_kernel, signature=dict(X=f"*{t}", Y=f"*{t}", Z=f"*{out}"), num_warps=nw,
                          constexprs=dict(BM=M, BN=N, BK=Kd, PREC=prec), target="sm_90a", divisible_by_16=("X", "Y", "Z"))


@pytest.mark.parametrize("t,out,M,N,Kd,nw,prec,inst", CASES)
def test_small_dot_instruction(t, out, M, N, Kd, nw, prec, inst):
    ptx = compile_small(t, out, M, N, Kd, nw, prec).asm["ptx"]
    assert inst in ptx and ("mma" in inst or "mma" not in ptx)
    if inst == F16_MMA:   # Triton's test_dot check (fp16 and fp8e5 operands, fp32 result)
        assert re.search(r'[mma|wgmma.mma_async].sync.aligned.m\d+n\d+k16(?:.row.col)?.f32.f16.f16', ptx)
    rep = ptxas.report(ptx, "sm_90a")
    assert int(re.search(r"(\d+) bytes spill stores", rep).group(1)) == 0, rep


@pytest.mark.parametrize("pm,pn,Kd,nw", [(16, 8, 32, 1), (16, 8, 16, 4), (64, 8, 64, 4), (16, 32, 32, 1)])
@pytest.mark.parametrize("kind", ["f16", "tf32"])
@pytest.mark.parametrize("a_cdim,b_cdim", [(1, 1), (0, 0), (1, 0)])
def test_padded_shapes_compute_the_product(pm, pn, Kd, nw, kind, a_cdim, b_cdim):
    """The padded [Pm, Pn] mma.sync shapes (an n8 tile alone, B's 16-byte rows, replicated warps),
    run on the numpy model of the lowering's tiles, fragments and instructions."""
    import numpy as np
    import tensor_core_model
    rng = np.random.default_rng(pm * 7 + pn + Kd + nw)
    A = rng.integers(-8, 8, (pm, Kd)).astype(np.float64)
    B = rng.integers(-8, 8, (Kd, pn)).astype(np.float64)
    D, _ = tensor_core_model.mma_sim(A, B, np.zeros((pm, pn)), nw, kind, a_cdim, b_cdim)
    np.testing.assert_array_equal(D, A @ B)


@pytest.mark.parametrize("M,N,nw", [(2, 4, 1), (1, 2, 1), (64, 4, 4), (8, 8, 4)])
def test_the_result_is_the_padded_accumulators_corner(M, N, nw):
    """The accumulator goes out through the [Pm, Pn] scratch into the result's own layout: run on
    the model of one CTA (simt_model) with the lowering's shared-memory writes and reads."""
    import numpy as np
    from compiler.backend.dot_layouts import mma_acc_layout
    from compiler.backend.layouts import default_layout
    from compiler.backend.llvm_types import F32
    from compiler.backend.small_dot import _within
    from compiler.language import dtypes as T
    from simt_model import Value
    from test_convert_chunks import ConvertingCTA
    pm, pn = max(16, M), max(8, N)
    acc_lay, want = mma_acc_layout(pm, pn, nw), default_layout((M, N), nw)
    elems = np.arange(pm * pn, dtype=np.int64).reshape(pm, pn) * 3 + 1
    cta = ConvertingCTA(nw)
    v, out = Value(0, (pm, pn), T.float32), Value(1, (M, N), T.float32)
    cta.put(v, acc_lay, elems)
    cta.smem_write(cta.block(v, acc_lay), _within(acc_lay, (pm, pn)), F32, 4)
    cta.set_block(out, want, cta.smem_read(_within(want, (pm, pn)), F32, 4))
    np.testing.assert_array_equal(cta.elements(out), elems[:M, :N])


def test_small_k_is_still_refused():
    with pytest.raises(triton.CompilationError, match=r"K >= 16 for tl.dot of 16-bit inputs, got M=2, N=4, K=8"):
        compile_small("fp16", "fp32", 2, 4, 8, 1, "ieee")


def tf32(x):
    """fp32 values rounded to the nearest tf32 (ties away from zero: cvt.rna), as float64."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).double()


def operands(g, t, M, N, Kd, device):
    x = torch.rand((M, Kd), generator=g, device=device, dtype=torch.float64) * 2 - 1
    y = torch.rand((Kd, N), generator=g, device=device, dtype=torch.float64) * 2 - 1
    return x.to(TORCH[t]), y.to(TORCH[t])


def check(z, x, y, out, prec):
    xs, ys = (tf32(x), tf32(y)) if prec == "tf32" else (x.double(), y.double())
    want = xs.cpu() @ ys.cpu()
    assert not z.isnan().any()
    if out == "fp16":   # fp16 accumulation (f16_accumulator.py): the bound of its tests
        tol = f16_accumulation_bound(x.cpu(), y.cpu())
        assert ((z.cpu().double() - want).abs() <= tol).all()
    else:               # fp32 sums of exact products
        torch.testing.assert_close(z.cpu().double(), want, rtol=1e-6, atol=1e-6)
    if prec == "tf32":   # the operands were rounded: the exact fp32 product is further off somewhere
        assert (z.cpu().double() - x.double().cpu() @ y.double().cpu()).abs().max() > 1e-6


def run_small(g, t, out, M, N, Kd, nw, prec, device):
    x, y = operands(g, t, M, N, Kd, device)
    z = torch.full((M, N), float("nan"), device=device, dtype=TORCH[out])
    K.small_dot_kernel[(1,)](x, y, z, BM=M, BN=N, BK=Kd, PREC=prec, num_warps=nw)
    if device == "cuda":
        torch.cuda.synchronize()
    check(z, x, y, out, prec)


@pytest.mark.parametrize("t,out,M,N,Kd,nw,prec,inst", CASES)
def test_small_dot_interpret(monkeypatch, t, out, M, N, Kd, nw, prec, inst):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    run_small(torch.Generator().manual_seed(M * 100 + N + Kd), t, out, M, N, Kd, nw, prec, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("t,out,M,N,Kd,nw,prec,inst", CASES)
def test_small_dot_gpu(gen, t, out, M, N, Kd, nw, prec, inst):
    run_small(gen, t, out, M, N, Kd, nw, prec, "cuda")
