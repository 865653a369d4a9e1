"""Block pointers and device-side tensor descriptors in interpret mode, their errors, and the PTX of
a block-pointer matmul (it must take the same cp.async/wgmma path as pointer arithmetic)."""
from __future__ import annotations

import math
import re

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler.errors import CompilationError
from tests.compiler.kernels import block_pointers as K
from tests.compiler.kernels.util import assert_close, gen, interpret, poisoned, rand  # noqa: F401


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_copy_with_boundary_check_and_padding(interpret, gen, padding):
    M, N, BM, BN = 10, 13, 4, 8
    x = rand(gen, (M, N), torch.float32)
    y = poisoned((M + 2, N + 2), torch.float32)
    K.copy2d_kernel[(3, 2)](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), BM=BM, BN=BN, PADDING=padding)
    ref = torch.full((M + 2, N + 2), float("nan") if padding == "nan" else 0.0)
    ref[:M, :N] = x
    # tiles cover rows 0..11 and cols 0..15; Y's extent (12 x 15) bounds the store
    assert_close(y, ref)


def test_strided_source(interpret, gen):
    M, N = 9, 7
    base = rand(gen, (N, M), torch.float32)
    x = base.t()  # column-major view: strides (1, M)
    y = poisoned((M + 2, N + 2), torch.float32)
    K.copy2d_kernel[(3, 1)](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), BM=4, BN=8, PADDING="zero")
    assert_close(y[:M, :N], x)
    assert (y[:, N] == 0).all() and (y[M:, :N + 1] == 0).all()  # inside Y's extent, outside X's: padding
    assert torch.isnan(y[:, N + 1]).all()  # outside every tile (one column of 8)


def test_advance_in_loop(interpret, gen):
    M, N = 37, 50
    x = rand(gen, (M, N), torch.float32)
    out = poisoned((M,), torch.float32)
    K.row_sum_kernel[(triton.cdiv(M, 16),)](x, out, M, N, BM=16, BN=16)
    assert_close(out, x.double().sum(1).float())


@pytest.mark.parametrize("M,N,Kd", [(64, 64, 64), (50, 70, 45)])
def test_block_pointer_matmul(interpret, gen, M, N, Kd):
    a, b = rand(gen, (M, Kd), torch.float16), rand(gen, (Kd, N), torch.float16)
    c = poisoned((M, N), torch.float32)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    K.matmul_block_ptr_kernel[grid](a, b, c, M, N, Kd, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), atol=1e-3 * math.sqrt(Kd), rtol=1e-3)


@pytest.mark.parametrize("M,N,Kd", [(64, 64, 64), (50, 72, 40)])
def test_tensor_descriptor_matmul(interpret, gen, M, N, Kd):
    a, b = rand(gen, (M, Kd), torch.float16), rand(gen, (Kd, N), torch.float16)
    c = poisoned((M, N), torch.float16)
    K.matmul_descriptor_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, Kd, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), atol=2e-2, rtol=2e-3)


@pytest.mark.parametrize("M,N,Kd", [(64, 64, 64), (50, 72, 40)])
def test_host_descriptor_matmul(interpret, gen, M, N, Kd):
    from compiler.tools.tensor_descriptor import TensorDescriptor
    a, b = rand(gen, (M, Kd), torch.float16), rand(gen, (Kd, N), torch.float16)
    c = poisoned((M, N), torch.float16)
    descs = (TensorDescriptor.from_tensor(a, [32, 16]), TensorDescriptor.from_tensor(b, [16, 32]),
             TensorDescriptor.from_tensor(c, [32, 32]))
    K.matmul_host_descriptor_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](*descs, Kd, BLOCK_K=16)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), atol=2e-2, rtol=2e-3)


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_host_descriptor_padding(interpret, gen, padding):
    from compiler.tools.tensor_descriptor import TensorDescriptor
    x = rand(gen, (10, 24), torch.float32)
    y = poisoned((16, 32), torch.float32)
    K.padded_copy_kernel[(2, 2)](TensorDescriptor.from_tensor(x, [8, 16], padding=padding), y, y.stride(0))
    ref = torch.full((16, 32), float("nan") if padding == "nan" else 0.0)
    ref[:10, :24] = x
    assert_close(y, ref)


def test_descriptor_atomic_add(interpret, gen):
    M, N, BM, BN, P = 6, 16, 8, 16, 3  # rows 6, 7 of the block are out of bounds: not added
    x = torch.round(rand(gen, (P, BM, BN), torch.float32, -8, 8))
    acc = torch.zeros(M, N)
    K.descriptor_atomic_add_kernel[(P,)](acc, x, M, N, BM=BM, BN=BN)
    assert torch.equal(acc, x.sum(0)[:M])


def _reduced(kind, x, out, M):
    ref = (x.amin(0) if kind == "min" else x.amax(0))[:M].to(out.dtype)
    return torch.minimum(out, ref) if kind == "min" else torch.maximum(out, ref)


@pytest.mark.parametrize("kind", ["min", "max"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_descriptor_atomic_min_max_of_halves(interpret, gen, kind, dtype):
    """A descriptor's atomics are Triton's TMA reductions, which have min/max on fp16 and bf16
    (pointer atomics do not)."""
    M, N, BM, BN, P = 6, 16, 8, 16, 3
    x = rand(gen, (P, BM, BN), torch.float32, -8, 8).to(dtype)
    out = rand(gen, (M, N), torch.float32, -8, 8).to(dtype)
    ref = _reduced(kind, x, out.clone(), M)
    K.descriptor_atomic_kernel[(P,)](out, x, M, N, BM=BM, BN=BN, KIND=kind)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("kind,dtype", [("min", "fp32"), ("max", "fp32"), ("add", "i64"), ("max", "i16")])
def test_descriptor_atomics_refuse_what_tma_reductions_lack(kind, dtype):
    with pytest.raises(CompilationError, match=f"descriptor atomic_{kind} is not supported on .*TMA reductions"):
        triton.compile(K.descriptor_atomic_kernel, signature={"Out": f"*{dtype}", "X": f"*{dtype}", "M": "i32", "N": "i32"},
                       constexprs={"BM": 8, "BN": 16, "KIND": kind}, num_warps=4, target="sm_90")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_descriptor_atomic_min_of_halves_ptx(dtype):
    from tests.compiler.test_ptx import ptxas_report
    ck = triton.compile(K.descriptor_atomic_kernel, signature={"Out": f"*{dtype}", "X": f"*{dtype}", "M": "i32", "N": "i32"},
                        constexprs={"BM": 32, "BN": 64, "KIND": "min"}, num_warps=4, target="sm_90",
                        divisible_by_16=("Out", "X", "N"))
    ptxas_report(ck.asm["ptx"])
    assert "cas.b16" in ck.asm["ptx"] and f"min.{'f16' if dtype == 'fp16' else 'bf16'}" in ck.asm["ptx"]


def test_host_descriptor_checks(interpret):
    from compiler.tools.tensor_descriptor import TensorDescriptor
    x = torch.zeros(8, 12)
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        TensorDescriptor.from_tensor(x.t(), [8, 8])
    with pytest.raises(ValueError, match="padding must be 'zero' or 'nan'"):
        TensorDescriptor.from_tensor(x, [8, 8], padding="inf")
    y = torch.zeros(16, 32)
    with pytest.raises(ValueError, match="must be multiples of 16 bytes"):  # 12 floats = 48 bytes is fine; 6 is not
        K.padded_copy_kernel[(1, 1)](TensorDescriptor(torch.zeros(8, 6), [8, 6], [6, 1], [8, 8]), y, 32)


@pytest.mark.parametrize("tma", [True, False])
def test_host_descriptor_matmul_ptx(tma, monkeypatch):
    """Host descriptors take the pipelined path: on sm_90 through TMA (one mbarrier per stage, the
    CUtensorMaps by-value parameters), with BLOCKTUNE_NO_TMA=1 through cp.async (their base/strides
    follow Triton's TMA rules, 16-byte aligned, and shapes are specialized on divisibility by 16)."""
    if not tma:
        monkeypatch.setenv("BLOCKTUNE_NO_TMA", "1")
    from tests.compiler.test_ptx import ptxas_report
    sig = {"a_desc": "tensordesc<fp16[128, 64]|zero|11>", "b_desc": "tensordesc<fp16[64, 128]|zero|11>",
           "c_desc": "tensordesc<fp16[128, 128]|zero|11>", "K": "i32"}
    ck = triton.compile(K.matmul_host_descriptor_kernel, signature=sig, constexprs={"BLOCK_K": 64}, num_warps=8,
                        num_stages=3, target="sm_90", divisible_by_16=("K",))
    ptx = ck.asm["ptx"]
    assert ptxas_report(ptx)["spills"] == 0
    assert ck.metadata["passed"][:5] == ["a_desc.base", "a_desc.shape0", "a_desc.shape1", "a_desc.stride0", "a_desc.stride1"]
    assert "wgmma.mma_async" in ptx
    if not tma:
        assert re.search(r"cp\.async\.cg\.shared\.global(\.\w+)* \[[^]]+\], \[[^]]+\], 16", ptx)
        assert "st.global.v4.b32" in ptx and "[128]" not in ptx
        assert "a_desc.tmap" not in ck.metadata["passed"]
        return
    assert "ld.global" not in ptx and "st.global" not in ptx and "cp.async.cg" not in ptx
    assert [p["abi"] for p in ck.metadata["params"] if p["name"].endswith(".tmap")] == ["tmap"] * 3
    # the maps are 128 bytes by value, 64-byte aligned; the copies name their generic address
    assert len(re.findall(r"\.param \.align 64 \.b8 \w+\[128\]", ptx)) == 3 and "cvta.param.u64" in ptx
    # A [128, 64] and B [64, 128] fp16 per stage: one 128-byte-swizzled panel for A, two for B
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 3 * 3
    assert re.search(r"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\], %r\d+;", ptx)
    assert ptx.count("mbarrier.init.shared::cta.b64") == 3 * 2 and ptx.count("mbarrier.inval.shared::cta.b64") == 3 * 2   # a barrier a tile a stage
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == 2


# -- errors ---------------------------------------------------------------------------------------

@triton.jit
def _mask_on_block_pointer(X, N, B: tl.constexpr):
    p = tl.make_block_ptr(X, (N,), (1,), (0,), (B,), (0,))
    tl.load(p, mask=tl.arange(0, B) < N)


@triton.jit
def _nan_padding_on_ints(X, N, B: tl.constexpr):
    p = tl.make_block_ptr(X, (N,), (1,), (0,), (B,), (0,))
    tl.load(p, boundary_check=(0,), padding_option="nan")


@triton.jit
def _bad_boundary_dim(X, N, B: tl.constexpr):
    p = tl.make_block_ptr(X, (N,), (1,), (0,), (B,), (0,))
    tl.load(p, boundary_check=(1,))


@triton.jit
def _bad_order(X, N, B: tl.constexpr):
    tl.make_block_ptr(X, (N, N), (N, 1), (0, 0), (B, B), (0, 0))


@triton.jit
def _boundary_check_on_pointers(X, N, B: tl.constexpr):
    tl.load(X + tl.arange(0, B), boundary_check=(0,))


@pytest.mark.parametrize("kernel,sig,message", [
    (_mask_on_block_pointer, {"X": "*fp32", "N": "i32"}, "`mask` and `other` arguments cannot be specified"),
    (_nan_padding_on_ints, {"X": "*i32", "N": "i32"}, "padding_option='nan' is only supported for floating-point"),
    (_bad_boundary_dim, {"X": "*fp32", "N": "i32"}, "boundary_check dim 1 is out of range"),
    (_bad_order, {"X": "*fp32", "N": "i32"}, "order must be a permutation"),
    (_boundary_check_on_pointers, {"X": "*fp32", "N": "i32"}, "boundary_check is only for block pointers"),
])
def test_errors_point_at_the_call(kernel, sig, message):
    with pytest.raises(CompilationError) as e:
        triton.compile(kernel, signature=sig, constexprs={"B": 16}, target="sm_90")
    assert message in str(e.value)
    assert re.search(r"test_block_pointers\.py:\d+:\d+", str(e.value))


# -- PTX ------------------------------------------------------------------------------------------

MATMUL_SIG = dict(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", M="i32", N="i32", K="i32", stride_am="i32",
                  stride_ak="i32", stride_bk="i32", stride_bn="i32", stride_cm="i32", stride_cn="i32")
MATMUL_DIV = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")


def _asm_counts(ptx: str) -> dict:
    return {k: ptx.count(k) for k in ("cp.async.cg.shared.global", "wgmma.mma_async", "mma.sync", "ld.global",
                                      "cp.async.wait_group", "st.global")}


@pytest.mark.parametrize("cx,nw", [({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, 4),
                                   ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, 8)])
def test_block_pointer_matmul_takes_the_pipelined_path(cx, nw, monkeypatch):
    """Block pointers take the cp.async pipeline the pointer kernel takes (with pointer tiles kept off
    TMA: backend/pointer_tma.py proves boxes of pointer arithmetic, not of block pointers)."""
    from tests.compiler.test_ptx import matmul_kernel, ptxas_report
    monkeypatch.setenv("BLOCKTUNE_POINTER_TMA", "0")
    counts = {}
    for name, kern in (("pointers", matmul_kernel), ("block_ptr", K.matmul_block_ptr_kernel)):
        ck = triton.compile(kern, signature=MATMUL_SIG, constexprs=cx, num_warps=nw, num_stages=3, target="sm_90",
                            divisible_by_16=MATMUL_DIV, equal_to_1=("stride_ak", "stride_bn", "stride_cn"))
        rep = ptxas_report(ck.asm["ptx"])
        assert rep["spills"] == 0, rep["text"]
        counts[name] = _asm_counts(ck.asm["ptx"])
    assert counts["block_ptr"] == counts["pointers"]
    assert counts["block_ptr"]["wgmma.mma_async"] > 0 and counts["block_ptr"]["cp.async.cg.shared.global"] > 0


@pytest.mark.parametrize("aligned", [True, False])
def test_tensor_descriptor_matmul_assembles(aligned):
    """Device-side descriptors go through TMA where the specialization proves the tensor maps'
    alignment (16-byte bases, row strides N and K divisible by 16): each program writes its three
    maps into the global scratch (a last, hidden parameter); else they stay bounds-checked loads."""
    from tests.compiler.test_ptx import ptxas_report
    div = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K") if aligned else ("a_ptr", "b_ptr", "c_ptr", "M")
    ck = triton.compile(K.matmul_descriptor_kernel, signature=dict(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", M="i32", N="i32", K="i32"),
                        constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3,
                        target="sm_90a", divisible_by_16=div)
    ptx = ck.asm["ptx"]
    assert ptxas_report(ptx)["spills"] == 0 or not aligned
    assert "wgmma.mma_async" in ptx
    if not aligned:
        assert "ld.global" in ptx and "tensormap" not in ptx and "cp.async.bulk" not in ptx
        assert "global_scratch_size" not in ck.metadata and ck.metadata["passed"][-1] == "K"
        return
    assert "ld.global" not in ptx and "cp.async.cg" not in ptx and "mbarrier.try_wait.parity" in ptx
    assert ck.metadata["passed"][-1] == "$global_scratch" and ck.metadata["global_scratch_size"] == 3 * 128
    assert ptx.count("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned") == 3
    assert ptx.count("fence.proxy.tensormap::generic.acquire.gpu") == 3
    assert ptx.count("tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%r") == 3


# -- GPU ------------------------------------------------------------------------------------------

@pytest.fixture
def cuda_gen():
    import secrets
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    return torch.Generator().manual_seed(seed)


def _cuda_nan(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_copy_with_boundary_check_gpu(cuda_gen, padding):
    M, N, BM, BN = 1000, 300, 64, 64
    x = torch.randn(M, N, generator=cuda_gen).cuda()
    y = _cuda_nan((M + 2, N + 2), torch.float32)
    K.copy2d_kernel[(triton.cdiv(M + 2, BM), triton.cdiv(N + 2, BN))](x, y, M, N, x.stride(0), x.stride(1), y.stride(0),
                                                                       y.stride(1), BM=BM, BN=BN, PADDING=padding)
    ref = torch.full((M + 2, N + 2), float("nan") if padding == "nan" else 0.0)
    ref[:M, :N] = x.cpu()
    torch.testing.assert_close(y.cpu(), ref, equal_nan=True, rtol=0, atol=0)


@pytest.mark.gpu
def test_advance_in_loop_gpu(cuda_gen):
    M, N = 1000, 777
    x = torch.randn(M, N, generator=cuda_gen).cuda()
    out = _cuda_nan((M,), torch.float32)
    K.row_sum_kernel[(triton.cdiv(M, 32),)](x, out, M, N, BM=32, BN=64)
    torch.testing.assert_close(out.double().cpu(), x.double().sum(1).cpu(), atol=1e-3, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,Kd,bm,bn,bk,nw", [(512, 512, 512, 128, 128, 64, 8), (300, 200, 100, 64, 64, 32, 4)])
def test_block_pointer_and_descriptor_matmul_gpu(cuda_gen, M, N, Kd, bm, bn, bk, nw):
    a = torch.randn(M, Kd, generator=cuda_gen).to("cuda", torch.float16)
    b = torch.randn(Kd, N, generator=cuda_gen).to("cuda", torch.float16)
    ref = a.double() @ b.double()
    c = _cuda_nan((M, N), torch.float16)
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
    K.matmul_block_ptr_kernel[grid](a, b, c, M, N, Kd, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                                    c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw)
    torch.testing.assert_close(c.double(), ref, atol=2e-2 * math.sqrt(Kd), rtol=1e-2)
    if (N * 2) % 16 == 0 and (Kd * 2) % 16 == 0:  # descriptors need 16-byte aligned rows
        c2 = _cuda_nan((M, N), torch.float16)
        K.matmul_descriptor_kernel[grid](a, b, c2, M, N, Kd, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw)
        torch.testing.assert_close(c2.double(), ref, atol=2e-2 * math.sqrt(Kd), rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,Kd", [(1024, 1024, 1024), (1000, 776, 392)])
def test_host_descriptor_matmul_gpu(cuda_gen, M, N, Kd):
    from compiler.tools.tensor_descriptor import TensorDescriptor
    a = torch.randn(M, Kd, generator=cuda_gen).to("cuda", torch.float16)
    b = torch.randn(Kd, N, generator=cuda_gen).to("cuda", torch.float16)
    c = _cuda_nan((M, N), torch.float16)
    descs = (TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [64, 128]),
             TensorDescriptor.from_tensor(c, [128, 128]))
    for _ in range(2):  # the second launch takes the cached launcher
        K.matmul_host_descriptor_kernel[(triton.cdiv(M, 128), triton.cdiv(N, 128))](*descs, Kd, BLOCK_K=64, num_warps=8)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), atol=2e-2 * math.sqrt(Kd), rtol=1e-2)


def test_descriptor_atomic_add_ptx():
    from tests.compiler.test_ptx import ptxas_report
    ck = triton.compile(K.descriptor_atomic_add_kernel, signature={"Acc": "*fp32", "X": "*fp32", "M": "i32", "N": "i32"},
                        constexprs={"BM": 32, "BN": 64}, num_warps=4, target="sm_90", divisible_by_16=("Acc", "X", "N"))
    ptxas_report(ck.asm["ptx"])
    assert "atom.global.gpu.relaxed.add.f32" in ck.asm["ptx"]


@pytest.mark.gpu
def test_descriptor_atomic_add_gpu(cuda_gen):
    M, N, BM, BN, P = 60, 64, 64, 64, 100
    x = torch.round(torch.randn(P, BM, BN, generator=cuda_gen) * 4).cuda()
    acc = torch.zeros(M, N, device="cuda")
    K.descriptor_atomic_add_kernel[(P,)](acc, x, M, N, BM=BM, BN=BN)
    assert torch.equal(acc.cpu(), x.sum(0)[:M].cpu())


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["min", "max"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_descriptor_atomic_min_max_of_halves_gpu(cuda_gen, kind, dtype):
    M, N, BM, BN, P = 60, 64, 64, 64, 100   # 100 programs race on one block; rows 60..63 out of bounds
    x = (torch.randn(P, BM, BN, generator=cuda_gen) * 4).to(dtype).cuda()
    out = (torch.randn(M, N, generator=cuda_gen) * 4).to(dtype).cuda()
    ref = _reduced(kind, x.cpu(), out.cpu(), M)
    K.descriptor_atomic_kernel[(P,)](out, x, M, N, BM=BM, BN=BN, KIND=kind)
    assert torch.equal(out.cpu(), ref)


def test_block_pointer_through_runtime_if(interpret, gen):
    x = rand(gen, (5, 32), torch.float32)
    out = poisoned((5, 16), torch.float32)
    K.branch_advance_kernel[(5,)](x, out, 32, 2, B=16)
    assert torch.equal(out[:2], x[:2, 16:]) and torch.equal(out[2:], x[2:, :16])


def test_block_pointer_through_runtime_if_ptx():
    from tests.compiler.test_ptx import ptxas_report
    ck = triton.compile(K.branch_advance_kernel, signature={"X": "*fp32", "Out": "*fp32", "N": "i32", "SKIP": "i32"},
                        constexprs={"B": 128}, num_warps=1, target="sm_90")
    ptxas_report(ck.asm["ptx"])
