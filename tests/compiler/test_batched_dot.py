"""tl.dot on 3-D blocks ([B, M, K] @ [B, K, N], Triton's test_dot3d): interpret mode against torch
(small dims too, as Triton's interpreter allows), the backend's refusal of dims under 16, the PTX
(assembled with ptxas) and the GPU."""
from __future__ import annotations

import pytest
import torch

import compiler as triton
from compiler.errors import CompilationError
import compiler.language as tl
from tests.compiler.kernels.batched_dot import batched_dot_kernel
from tests.compiler.kernels.util import gen, interpret, poisoned, rand  # noqa: F401

TL = {torch.float16: tl.float16, torch.float32: tl.float32, torch.int32: tl.int32, torch.float64: tl.float64}


def _run(gen, B, M, N, K, in_dtype, out_dtype, use_acc, device="cpu", precision="ieee"):
    lo, hi = (-8, 8) if not in_dtype.is_floating_point else (-1, 1)
    q, k = rand(gen, (B, M, K), in_dtype, lo, hi), rand(gen, (B, K, N), in_dtype, lo, hi)
    acc = rand(gen, (B, M, N), out_dtype, lo, hi)
    o = poisoned((B, M, N), out_dtype)
    q, k, acc, o = (t.to(device) for t in (q, k, acc, o))
    batched_dot_kernel[(1,)](q, k, acc, o, q.stride(0), q.stride(1), k.stride(0), k.stride(1), o.stride(0), o.stride(1),
                             B=B, M=M, N=N, K=K, USE_ACC=use_acc, OUT_DTYPE=TL[out_dtype], PRECISION=precision)
    wide = torch.float64 if in_dtype.is_floating_point else torch.int64
    ref = torch.bmm(q.cpu().to(wide), k.cpu().to(wide)) + (acc.cpu().to(wide) if use_acc else 0)
    return o.cpu(), ref


@pytest.mark.parametrize("B,M,N,K", [(1, 16, 16, 16), (2, 32, 16, 32), (4, 16, 32, 16), (8, 1, 32, 16), (2, 32, 2, 8)])
@pytest.mark.parametrize("in_dtype,out_dtype", [(torch.float16, torch.float32), (torch.float32, torch.float32),
                                                (torch.float16, torch.float16), (torch.float64, torch.float64)])
@pytest.mark.parametrize("use_acc", [False, True])
def test_batched_dot(interpret, gen, B, M, N, K, in_dtype, out_dtype, use_acc):
    o, ref = _run(gen, B, M, N, K, in_dtype, out_dtype, use_acc)
    tol = {torch.float16: 2e-2, torch.float32: 1e-4, torch.float64: 1e-10}[out_dtype if out_dtype != torch.float32 else in_dtype]
    torch.testing.assert_close(o.to(torch.float64), ref, atol=tol * K ** 0.5, rtol=tol)


def test_batched_int8_dot_is_exact(interpret, gen):
    o, ref = _run(gen, 4, 16, 32, 64, torch.int8, torch.int32, True)
    assert torch.equal(o.to(torch.int64), ref)


@triton.jit
def _mismatched(X, Y):
    a = tl.zeros((2, 16, 16), dtype=tl.float16)
    b = tl.zeros((4, 16, 16), dtype=tl.float16)
    tl.store(X + tl.arange(0, 16), tl.sum(tl.sum(tl.dot(a, b), 0), 0))


def test_batch_sizes_must_match(interpret):
    with pytest.raises(CompilationError, match=r"batched shapes do not match \(\[2, 16, 16\] @ \[4, 16, 16\]"):
        _mismatched[(1,)](torch.zeros(16), torch.zeros(16))


_SIG = {"Q": "*fp16", "Kt": "*fp16", "Acc": "*fp32", "O": "*fp32", "stride_qb": "i32", "stride_qm": "i32",
        "stride_kb": "i32", "stride_kk": "i32", "stride_ob": "i32", "stride_om": "i32"}


def _compile(B, M, N, K, use_acc, in_ty="fp16", out_ty="fp32", num_warps=4):
    sig = dict(_SIG, Q=f"*{in_ty}", Kt=f"*{in_ty}", Acc=f"*{out_ty}", O=f"*{out_ty}")
    return triton.compile(batched_dot_kernel, signature=sig, num_warps=num_warps, target="sm_90",
                          constexprs={"B": B, "M": M, "N": N, "K": K, "USE_ACC": use_acc,
                                      "OUT_DTYPE": {"fp32": tl.float32, "fp16": tl.float16}[out_ty], "PRECISION": "tf32"})


@pytest.mark.parametrize("B,M,N,K,in_ty,out_ty,nw", [(2, 32, 32, 32, "fp16", "fp32", 4), (4, 64, 64, 32, "fp16", "fp16", 8),
                                                     (8, 16, 16, 16, "fp32", "fp32", 1)])
def test_batched_dot_ptx_uses_tensor_cores(B, M, N, K, in_ty, out_ty, nw):
    from tests.compiler.test_ptx import ptxas_report
    ptx = _compile(B, M, N, K, True, in_ty, out_ty, nw).asm["ptx"]
    assert ptxas_report(ptx)["spills"] == 0
    assert "mma" in ptx


def test_small_batched_dots_are_padded_onto_mma():
    """M under 16: padded onto mma.sync as Triton's (test_small_dots.py), where the backend refused
    them before."""
    from tests.compiler.test_ptx import ptxas_report
    ptx = _compile(2, 8, 32, 32, False).asm["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert ptxas_report(ptx)["spills"] == 0


def _multidim(rank, trans_a, trans_b, device="cpu"):
    from tests.compiler.kernels.batched_dot import multidim_dot_kernel
    shape = (2,) * (rank - 2) + (32, 32)
    g = torch.Generator().manual_seed(rank * 4 + trans_a * 2 + trans_b)
    a = torch.randint(-4, 5, shape, generator=g).to(torch.float16)
    b = torch.randint(-4, 5, shape, generator=g).to(torch.float16)
    c = torch.full(shape, float("nan"), device=device)
    multidim_dot_kernel[(1,)](a.to(device), b.to(device), c, RANK=rank, TRANS_A=trans_a, TRANS_B=trans_b)
    ta, tb = (a.transpose(-1, -2) if trans_a else a), (b.transpose(-1, -2) if trans_b else b)
    return c.cpu(), ta.float() @ tb.float()


@pytest.mark.parametrize("rank,trans_a,trans_b", [(3, False, True), (4, True, False), (5, True, True)])
def test_dots_of_more_dims_batch_over_the_leading_ones(interpret, rank, trans_a, trans_b):
    c, ref = _multidim(rank, trans_a, trans_b)
    assert torch.equal(c, ref)


@pytest.mark.parametrize("rank", [4, 5])
def test_dots_of_more_dims_ptx(rank):
    from tests.compiler.kernels.batched_dot import multidim_dot_kernel
    from tests.compiler.test_ptx import ptxas_report
    ptx = triton.compile(multidim_dot_kernel, signature={"X": "*fp16", "Y": "*fp16", "Z": "*fp32"}, target="sm_90",
                         constexprs={"RANK": rank, "TRANS_A": True, "TRANS_B": False}).asm["ptx"]
    ptxas_report(ptx)
    assert "mma" in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("rank,trans_a,trans_b", [(3, False, True), (4, True, False), (5, True, True), (6, False, False)])
def test_dots_of_more_dims_gpu(rank, trans_a, trans_b):
    c, ref = _multidim(rank, trans_a, trans_b, device="cuda")
    assert torch.equal(c, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("B,M,N,K,in_dtype,out_dtype,use_acc,precision", [
    (2, 32, 32, 32, torch.float16, torch.float32, False, "ieee"), (4, 64, 64, 64, torch.float16, torch.float16, True, "ieee"),
    (8, 32, 32, 32, torch.float32, torch.float32, True, "tf32"), (4, 16, 32, 64, torch.float32, torch.float32, False, "ieee"),
    (2, 32, 32, 32, torch.float64, torch.float64, True, "ieee")])
def test_batched_dot_gpu(gen, B, M, N, K, in_dtype, out_dtype, use_acc, precision):
    o, ref = _run(gen, B, M, N, K, in_dtype, out_dtype, use_acc, device="cuda", precision=precision)
    tol = {"tf32": 2e-3, "ieee": 2e-2 if torch.float16 in (in_dtype, out_dtype) else 1e-5}[precision]
    torch.testing.assert_close(o.to(torch.float64), ref, atol=tol * K ** 0.5, rtol=tol)


@pytest.mark.gpu
def test_batched_int8_dot_gpu(gen):
    o, ref = _run(gen, 4, 32, 32, 64, torch.int8, torch.int32, True, device="cuda")
    assert torch.equal(o.to(torch.int64), ref)
