"""`tl.dot` with M or N under 16 on the GPU (Triton's test_dot small-dot cases: [2, 32] @ [32, 4] fp16 and
[1, 32] @ [32, 2] fp8e5, one warp): FMA dots in fp32 — exact products of fp16/fp8 operands, fp32
operands rounded to tf32 first where input_precision asks for it, as the tensor cores would — where
the backend refused them before. K keeps Triton's minimum (16, 32 for 8-bit operands).

PTX (FMAs, no tensor-core instruction, assembled by ptxas), interpret mode and (`gpu`) the GPU against
torch in float64."""
from __future__ import annotations

import re

import pytest

import compiler as triton
from compiler import ptxas
from tests.compiler.kernels import small_dots as K

torch = pytest.importorskip("torch")

# (operand type, result type, M, N, K, num_warps, input_precision)
CASES = [("fp16", "fp32", 2, 4, 32, 1, "ieee"), ("fp8e5", "fp32", 1, 2, 32, 1, "ieee"),
         ("fp32", "fp32", 4, 64, 16, 1, "tf32"), ("fp32", "fp32", 8, 32, 32, 2, "ieee"),
         ("fp16", "fp32", 64, 4, 64, 4, "ieee"), ("fp16", "fp16", 4, 32, 32, 1, "ieee")]
TORCH = {"fp16": torch.float16, "fp32": torch.float32, "fp8e5": torch.float8_e5m2}


def compile_small(t, out, M, N, Kd, nw, prec):
    return triton.compile(K.small_dot_kernel, signature=dict(X=f"*{t}", Y=f"*{t}", Z=f"*{out}"), num_warps=nw,
                          constexprs=dict(BM=M, BN=N, BK=Kd, PREC=prec), target="sm_90a", divisible_by_16=("X", "Y", "Z"))


@pytest.mark.parametrize("t,out,M,N,Kd,nw,prec", CASES)
def test_small_dot_is_fmas(t, out, M, N, Kd, nw, prec):
    ptx = compile_small(t, out, M, N, Kd, nw, prec).asm["ptx"]
    assert "fma.rn.f32" in ptx and "mma" not in ptx
    assert ("cvt.rna.tf32.f32" in ptx) == (prec == "tf32")
    rep = ptxas.report(ptx, "sm_90a")
    assert int(re.search(r"(\d+) bytes spill stores", rep).group(1)) == 0, rep


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
    tol = 2 ** -10 if out == "fp16" else 1e-6   # fp32 sums of exact products; one fp16 rounding
    torch.testing.assert_close(z.cpu().double(), want, rtol=tol, atol=tol)
    if prec == "tf32":   # the operands were rounded: the exact fp32 product is further off somewhere
        assert (z.cpu().double() - x.double().cpu() @ y.double().cpu()).abs().max() > 1e-6


def run_small(g, t, out, M, N, Kd, nw, prec, device):
    x, y = operands(g, t, M, N, Kd, device)
    z = torch.full((M, N), float("nan"), device=device, dtype=TORCH[out])
    K.small_dot_kernel[(1,)](x, y, z, BM=M, BN=N, BK=Kd, PREC=prec, num_warps=nw)
    if device == "cuda":
        torch.cuda.synchronize()
    check(z, x, y, out, prec)


@pytest.mark.parametrize("t,out,M,N,Kd,nw,prec", CASES)
def test_small_dot_interpret(monkeypatch, t, out, M, N, Kd, nw, prec):
    monkeypatch.setenv("BLOCKTUNE_INTERPRET", "1")
    run_small(torch.Generator().manual_seed(M * 100 + N + Kd), t, out, M, N, Kd, nw, prec, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("t,out,M,N,Kd,nw,prec", CASES)
def test_small_dot_gpu(t, out, M, N, Kd, nw, prec):
    import secrets
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    run_small(torch.Generator(device="cuda").manual_seed(seed), t, out, M, N, Kd, nw, prec, "cuda")
