"""Triton's tutorials 05 backward (layer-norm: atomic_cas spin lock, atomic_xchg, debug_barrier),
08 (grouped GEMM) and 09 (persistent matmul, device-side tensor descriptors): interpret mode
against torch in float64, the PTX of each kernel through ptxas, and GPU runs (marked `gpu`)."""
from __future__ import annotations

import math
import re
import secrets

import pytest
import torch

from tests.compiler import ptx_cfg
from tests.compiler.kernels import tutorials as T
from tests.compiler.kernels.tutorials_more import grouped_gemm as G
from tests.compiler.kernels.tutorials_more import layernorm_bwd as L
from tests.compiler.kernels.tutorials_more import persistent_matmul as P
from tests.compiler.kernels.util import gen, interpret  # noqa: F401

import compiler as triton


def _layer_norm_grads(x, w, b, dy, eps):
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    torch.nn.functional.layer_norm(xd, (x.shape[-1],), wd, bd, eps).backward(dy.double())
    return xd.grad, wd.grad, bd.grad


def _check_layer_norm_backward(x, w, b, dy, group_m, dtype_tol):
    eps = 1e-5
    _, mean, rstd = T.layer_norm_forward(x, (x.shape[-1],), w, b, eps)
    dx, dw, db = L.layer_norm_backward(dy, x, w, mean, rstd, group_m=group_m)
    rdx, rdw, rdb = _layer_norm_grads(x, w, b, dy, eps)
    rows = x.shape[0]
    torch.testing.assert_close(dx.double().cpu(), rdx.cpu(), atol=dtype_tol, rtol=dtype_tol)
    # dw/db add one partial per row: the error grows with the number of rows
    torch.testing.assert_close(dw.double().cpu(), rdw.cpu(), atol=dtype_tol * math.sqrt(rows), rtol=dtype_tol)
    torch.testing.assert_close(db.double().cpu(), rdb.cpu(), atol=dtype_tol * math.sqrt(rows), rtol=dtype_tol)


@pytest.mark.parametrize("M,N,group_m", [(67, 300, 8), (20, 64, 32), (9, 1024, 4)])
def test_05_layer_norm_backward(interpret, gen, M, N, group_m):
    x = torch.randn(M, N, generator=gen)
    w, b = torch.randn(N, generator=gen), torch.randn(N, generator=gen)
    dy = torch.randn(M, N, generator=gen)
    _check_layer_norm_backward(x, w, b, dy, group_m, 1e-4)


def _group(g, sizes, device="cpu"):
    As = [torch.randn(m, k, generator=g).to(device=device, dtype=torch.float16) for m, n, k in sizes]
    Bs = [torch.randn(k, n, generator=g).to(device=device, dtype=torch.float16) for m, n, k in sizes]
    return As, Bs


def _check_group(As, Bs, Cs):
    for a, b, c in zip(As, Bs, Cs):
        ref = a.double() @ b.double()
        torch.testing.assert_close(c.double(), ref, atol=2e-2 * math.sqrt(a.shape[1]), rtol=1e-2)


def test_08_grouped_gemm(interpret, gen):
    As, Bs = _group(gen, [(64, 32, 32), (32, 64, 64), (96, 32, 16)])
    Cs = G.group_gemm(As, Bs, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=16, NUM_SM=4)
    _check_group(As, Bs, Cs)


@pytest.mark.parametrize("M,N,K,num_sms", [(100, 90, 72, 3), (64, 64, 64, 16)])
def test_09_persistent_matmul_device_descriptors(interpret, gen, M, N, K, num_sms):
    a = torch.randn(M, K, generator=gen).half()
    b = torch.randn(N, K, generator=gen).half()
    c = P.matmul_descriptor_persistent(a, b, num_sms, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=16, GROUP_SIZE_M=2)
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, atol=2e-2 * math.sqrt(K), rtol=1e-2)


# -- PTX ------------------------------------------------------------------------------------------

def _assemble(kernel, sig, cx, nw=4, ns=3, div=()):
    from tests.compiler.test_ptx import ptxas_report
    ck = triton.compile(kernel, signature=sig, constexprs=cx, num_warps=nw, num_stages=ns, target="sm_90",
                        divisible_by_16=div)
    rep = ptxas_report(ck.asm["ptx"])
    assert rep["spills"] == 0, rep["text"]
    return ck.asm["ptx"]


def test_05_backward_ptx():
    ptx = _assemble(L._layer_norm_bwd_dx_fused, dict(DX="*fp16", DY="*fp16", DW="*fp16", DB="*fp16", X="*fp16", W="*fp16",
                                                    Mean="*fp32", Rstd="*fp32", Lock="*i32", stride="i32", N="i32"),
                    {"GROUP_SIZE_M": 64, "BLOCK_SIZE_N": 1024}, div=("DX", "DY", "DW", "DB", "X", "W", "stride"))
    assert "atom.global.acq_rel.gpu.cas.b32" in ptx and "atom.global.gpu.acq_rel.exch.b32" in ptx
    assert "bar.sync" in ptx
    _assemble(L._layer_norm_bwd_dwdb, dict(DW="*fp16", DB="*fp16", FINAL_DW="*fp16", FINAL_DB="*fp16", M="i32", N="i32"),
              {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 128}, div=("DW", "DB", "FINAL_DW", "FINAL_DB", "N"))


def test_08_grouped_gemm_ptx():
    ptx = _assemble(G.grouped_matmul_kernel, dict(group_a_ptrs="*i64", group_b_ptrs="*i64", group_c_ptrs="*i64",
                                                  group_gemm_sizes="*i32", g_lds="*i32", group_size="i32"),
                    {"NUM_SM": 132, "BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64}, nw=4,
                    div=("group_a_ptrs", "group_b_ptrs", "group_c_ptrs", "group_gemm_sizes", "g_lds"))
    assert "wgmma.mma_async" in ptx or "mma.sync" in ptx


def test_05_backward_dx_fits_two_ctas_per_sm_at_n8192():
    """The dx kernel at the benchmark's widest rows (BLOCK_SIZE_N 8192 and 4096, 8 warps): no more
    registers than Triton's (128 and 73), so at 8192 two CTAs share an SM as with Triton. The partial sums cross
    the spin lock in fp32 and are converted after it; converting two registers at a time keeps LLVM
    from narrowing them into unpacked 16-bit phis across the lock (166 registers before: one CTA per
    SM, 0.81× Triton at 4096×8192)."""
    from tests.compiler.test_ptx import ptxas_report
    sig = dict(DX="*fp16", DY="*fp16", DW="*fp16", DB="*fp16", X="*fp16", W="*fp16", Mean="*fp32", Rstd="*fp32",
               Lock="*i32", stride="i32", N="i32")
    div = ("DX", "DY", "DW", "DB", "X", "W", "Mean", "Rstd", "Lock", "stride", "N")
    for block, group, limit in ((8192, 96, 128), (4096, 128, 73)):
        ptx = _assemble(L._layer_norm_bwd_dx_fused, sig, {"GROUP_SIZE_M": group, "BLOCK_SIZE_N": block}, nw=8, div=div)
        regs = ptxas_report(ptx)["regs"]
        assert regs <= limit, f"BLOCK_SIZE_N={block}: {regs} registers"
        assert "cvt.rn.f16x2.f32" in ptx


@pytest.mark.parametrize("bm,bn,bk", [(128, 128, 64), (64, 64, 32), (64, 128, 64)])
def test_08_grouped_gemm_k_loop_is_pipelined_inside_the_tile_loops(bm, bn, bk):
    """The K loop sits in a `while` over this program's tiles inside a `for` over the problems, and its
    A/B pointers come from device arrays loaded per tile: it still gets the tutorial matmul's
    pipeline — 16-byte cp.async copies of a later iteration in the loop, cp.async.wait_group 2
    (num_stages 3, a group per tile), asynchronous wgmma with one group left in flight, no operand through registers —
    while the pointer loads stay in the tile loop around it."""
    ptx = _assemble(G.grouped_matmul_kernel, dict(group_a_ptrs="*i64", group_b_ptrs="*i64", group_c_ptrs="*i64",
                                                  group_gemm_sizes="*i32", g_lds="*i32", group_size="i32"),
                    {"NUM_SM": 132, "BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk}, nw=4,
                    div=("group_a_ptrs", "group_b_ptrs", "group_c_ptrs", "group_gemm_sizes", "g_lds"))
    k_loop = ptx_cfg.innermost_loop_with(ptx, "wgmma.mma_async")
    assert len(k_loop.parents) == 2, "the K loop is not nested in the tile and problem loops"
    copies = re.findall(r"cp\.async\.cg\.shared\.global \[[^]]+\], \[[^]]+\], 16\b", k_loop.text)
    assert len(copies) == (bm * bk + bk * bn) * 2 // 16 // 128   # one A and one B tile per iteration, 128 threads
    assert re.search(r"cp\.async\.wait_group\s+2;", k_loop.text)
    assert k_loop.text.count("cp.async.commit_group") == 2
    assert "wgmma.wait_group.sync.aligned 1;" in k_loop.text
    assert "ld.global" not in k_loop.text
    tile_loop = k_loop.parents[0]
    assert "ld.global.b64" in tile_loop.text     # the problem's A/B/C addresses, once per tile


def test_09_persistent_matmul_ptx():
    ptx = _assemble(P.matmul_kernel_descriptor_persistent, dict(a_ptr="*fp16", b_ptr="*fp16", c_ptr="*fp16", M="i32", N="i32", K="i32"),
                    {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "EPILOGUE_SUBTILE": False,
                     "NUM_SMS": 132, "WARP_SPECIALIZE": False}, nw=8, div=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K"))
    # tensor cores fed by TMA (compiler/backend/tma.py): the three maps written once a program, A
    # and B (used as b.T) pipelined through three stages — the first tile's two before the tile
    # loop, one ahead in the K loop or the next tile's past its end, the next tile's two the K
    # loop did not reach before this tile's epilogue (compiler/backend/persistent.py) —, C stored
    # in two 128-byte panels
    assert "wgmma.mma_async" in ptx and "ld.global" not in ptx and "st.global" not in ptx
    assert ptx.count("tensormap.cp_fenceproxy") == 3 and ptx.count("mbarrier.init.shared::cta.b64") == 3 * 2
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global") == (2 + 2 + 2) * 2
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta") == 2


# -- GPU ------------------------------------------------------------------------------------------

@pytest.fixture
def cuda_gen():
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    return torch.Generator().manual_seed(seed)


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,dtype", [(4096, 1024, torch.float16), (1151, 8192, torch.float16), (2000, 300, torch.float32)])
def test_05_layer_norm_backward_gpu(cuda_gen, M, N, dtype):
    x = torch.randn(M, N, generator=cuda_gen).to("cuda", dtype)
    w, b = (torch.randn(N, generator=cuda_gen).to("cuda", dtype) for _ in range(2))
    dy = (0.1 * torch.randn(M, N, generator=cuda_gen)).to("cuda", dtype)
    _check_layer_norm_backward(x, w, b, dy, None, 2e-2 if dtype == torch.float16 else 1e-4)


@pytest.mark.gpu
def test_08_grouped_gemm_gpu(cuda_gen):
    sizes = [(1024, 1024, 1024), (512, 256, 128), (128, 512, 256), (256, 128, 512)]
    As, Bs = _group(cuda_gen, sizes, "cuda")
    Cs = G.group_gemm(As, Bs, BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=32, NUM_SM=132)
    _check_group(As, Bs, Cs)
    _check_group(As, Bs, G.group_gemm(As, Bs))  # the autotuned launch


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(1024, 1024, 512), (1000, 700, 300)])
def test_09_persistent_matmul_gpu(cuda_gen, M, N, K):
    a = torch.randn(M, K, generator=cuda_gen).to("cuda", torch.float16)
    b = torch.randn(N, K, generator=cuda_gen).to("cuda", torch.float16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    c = P.matmul_descriptor_persistent(a, b, sms)
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, atol=2e-2 * math.sqrt(K), rtol=1e-2)


def test_statement_multiple_of_hints_the_value_and_enables_pipelining():
    """`tl.multiple_of(a_ptrs, [16, 16])` as a statement (tutorial 08) informs later uses of
    a_ptrs as in Triton, so the K loop of the grouped GEMM gets 16-byte cp.async copies, and
    `accumulator += tl.dot(a, b)` accumulates in the dot (no spills at 128×128 with 4 warps)."""
    ptx = _assemble(G.grouped_matmul_kernel, dict(group_a_ptrs="*i64", group_b_ptrs="*i64", group_c_ptrs="*i64",
                                                  group_gemm_sizes="*i32", g_lds="*i32", group_size="i32"),
                    {"NUM_SM": 132, "BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32}, nw=4,
                    div=("group_a_ptrs", "group_b_ptrs", "group_c_ptrs", "group_gemm_sizes", "g_lds"))
    import re
    assert re.search(r"cp\.async\.cg\.shared\.global(\.\w+)* \[[^]]+\], \[[^]]+\], 16", ptx)
