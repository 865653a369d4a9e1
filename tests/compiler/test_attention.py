"""Triton's tutorial 06 (fused attention, bench/attention_kernels.py): forward (host and in-kernel
tensor descriptors, `tl.range(..., warp_specialize=...)`, autotune with a pre_hook and
`prune_configs_by`) and backward through torch.autograd, in interpret mode against float64;
the kernels' PTX through ptxas; and GPU runs (marked `gpu`) against a float32 reference and
torch's SDPA."""
from __future__ import annotations

import re
import secrets

import pytest
import torch

from tests.compiler.kernels.attention import attention_kernels as A
from tests.compiler.kernels.util import gen, interpret  # noqa: F401
from tests.compiler.test_dot_mma import _nvdisasm

import compiler as triton


def _reference(q, k, v, causal, sm_scale, do):
    """(out, dq, dk, dv) of softmax(q kᵀ · sm_scale) v in float64 (or float32 on the GPU)."""
    ref_dtype = torch.float64 if q.device.type == "cpu" else torch.float32
    qr, kr, vr = (t.detach().to(ref_dtype).requires_grad_() for t in (q, k, v))
    s = qr @ kr.transpose(-1, -2) * sm_scale
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    out = torch.softmax(s, -1) @ vr
    out.backward(do.to(ref_dtype))
    return out.detach(), qr.grad, kr.grad, vr.grad


def _check(q, k, v, causal, sm_scale, host_descriptors, mode, gen_or_none=None):
    do = torch.randn(q.shape, generator=gen_or_none, dtype=torch.float64).to(q.device, q.dtype)
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = A.attention(qg, kg, vg, causal, sm_scale, False, host_descriptors)
    ref_out, ref_dq, ref_dk, ref_dv = _reference(q, k, v, causal, sm_scale, do)
    # fp16/bf16 storage of the output and of P and dS between the dots
    tol = 1e-2 if q.dtype == torch.float16 else 3e-2
    torch.testing.assert_close(out.to(ref_out.dtype), ref_out, atol=tol, rtol=0)
    if mode == "fwd":
        return
    out.backward(do)
    for name, got, want in (("dv", vg.grad, ref_dv), ("dk", kg.grad, ref_dk), ("dq", qg.grad, ref_dq)):
        scale = want.abs().max().item()
        torch.testing.assert_close(got.to(want.dtype), want, atol=tol * max(scale, 1.0), rtol=0, msg=lambda m: f"{name}: {m}")


def _inputs(g, shape, dtype, device="cpu"):
    return [torch.empty(shape, dtype=torch.float64).normal_(0.0, 0.5, generator=g).to(device, dtype) for _ in range(3)]


# -- interpret mode -------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("Z,H,N_CTX,HEAD_DIM", [(1, 2, 128, 64), (2, 1, 256, 64), (1, 1, 128, 128)])
@pytest.mark.parametrize("host_descriptors", [True, False])
def test_attention_forward_backward(interpret, gen, Z, H, N_CTX, HEAD_DIM, causal, host_descriptors):
    q, k, v = _inputs(gen, (Z, H, N_CTX, HEAD_DIM), torch.float16)
    _check(q, k, v, causal, 0.5, host_descriptors, "bwd", gen)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_bfloat16(interpret, gen, causal):
    q, k, v = _inputs(gen, (1, 2, 128, 64), torch.bfloat16)
    _check(q, k, v, causal, 0.5, False, "bwd", gen)


def test_attention_autotune_prunes_blocks_longer_than_the_sequence(interpret, gen, monkeypatch):
    """The tutorial's config list: prune_configs_by drops BLOCK_M > N_CTX, each remaining config runs
    with its pre_hook setting the host descriptors' block shapes (BLOCK_N > HEAD_DIM fails its
    static_assert and is skipped), and every config that runs gives the right answer."""
    tuned = A._attn_fwd
    ran = []

    def bench(kernel_call, quantiles):
        kernel_call()
        ran.append(1)
        return [float(len(ran))] * 3   # the first config that runs is the fastest

    configs = [c for c in A._all_configs() if c.num_stages == 2 and c.num_warps == 4]
    monkeypatch.setattr(tuned, "configs", configs)
    monkeypatch.setattr(tuned, "_do_bench", bench)
    monkeypatch.setattr(tuned, "cache", {})
    kept = tuned.prune_configs({"N_CTX": 64})
    assert sorted({c.kwargs["BLOCK_M"] for c in kept}) == [64] and len(kept) == 3
    q, k, v = _inputs(gen, (1, 2, 64, 32), torch.float16)
    _check(q, k, v, True, 0.3, True, "fwd", gen)
    assert len(ran) == 1   # BLOCK_N 64 and 128 exceed HEAD_DIM 32
    assert tuned.best_config.kwargs == {"BLOCK_M": 64, "BLOCK_N": 32}


def test_warp_specialize_is_accepted_as_a_hint(interpret, gen):
    q, k, v = _inputs(gen, (1, 1, 128, 64), torch.float16)
    do = torch.randn(q.shape, generator=gen, dtype=torch.float64).half()
    ref = _reference(q, k, v, False, 0.7, do)[0]
    out = A.attention(q, k, v, False, 0.7, True, False)
    torch.testing.assert_close(out.double(), ref, atol=1e-2, rtol=0)


# -- PTX ------------------------------------------------------------------------------------------

def _fwd_args(head_dim, block_m, block_n, causal=False, host_descriptors=True, warp_specialize=False):
    desc = (lambda rows: f"tensordesc<fp16[{rows}, {head_dim}]|zero|11>") if host_descriptors else (lambda rows: "*fp16")
    sig = dict(sm_scale="fp32", M="*fp32", Z="i32", H="i32", desc_q=desc(block_m), desc_k=desc(block_n),
               desc_v=desc(block_n), desc_o=desc(block_m), N_CTX="i32")
    cx = dict(HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, FP8_OUTPUT=False, STAGE=3 if causal else 1,
              warp_specialize=warp_specialize, IS_HOPPER=True)
    div = ("M", "N_CTX") + (() if host_descriptors else ("desc_q", "desc_k", "desc_v", "desc_o"))
    return dict(signature=sig, constexprs=cx, target="sm_90", divisible_by_16=div)


def _fwd_ptx(head_dim, block_m, block_n, num_warps, causal, host_descriptors=True, warp_specialize=False):
    return triton.compile(A._attn_fwd.fn, **_fwd_args(head_dim, block_m, block_n, causal, host_descriptors, warp_specialize),
                          num_warps=num_warps, num_stages=3)


@pytest.mark.parametrize("head_dim,block_m,block_n,num_warps,causal,host", [
    (64, 128, 64, 4, False, True), (64, 128, 64, 8, True, True), (128, 128, 64, 8, True, False),
    (128, 128, 128, 8, False, True)])
def test_attention_forward_ptx(head_dim, block_m, block_n, num_warps, causal, host):
    from tests.compiler.test_ptx import ptxas_report
    ck = _fwd_ptx(head_dim, block_m, block_n, num_warps, causal, host)
    ptx = ck.asm["ptx"]
    rep = ptxas_report(ptx)
    # launched with room for Q's tile (kept for the whole kernel) and two stages of K and V tiles
    assert ck.shared >= 2 * head_dim * (block_m + 2 * 2 * block_n)
    assert rep["spills"] == 0, rep["text"]
    assert "wgmma.mma_async" in ptx
    # host and device-side descriptors go through TMA (compiler/backend/tma.py): K and V pipelined
    # on one mbarrier per stage (multi_dot.py), Q and O one tile each; no global loads at all
    assert "ld.global" not in ptx and "cp.async.cg.shared.global" not in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.try_wait.parity.shared::cta.b64" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in ptx
    # device-side: the program writes its four maps (Q, K, V, O) into the global scratch first
    assert ptx.count("tensormap.cp_fenceproxy") == (0 if host else 4)
    # P feeds the second wgmma from registers: four b32 registers as A, no descriptor
    assert re.search(r"wgmma\.mma_async[^;]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+", ptx)
    # Q·Kᵀ starts from zero with scale-d the immediate 0, as Triton's (no zeros moved into 32-64
    # accumulator registers per key block; with them ptxas waited for the first wgmma of the group)
    assert re.search(r"wgmma\.mma_async[^;]*\}, %rd\d+, %rd\d+, 0, 1, 1", ptx)
    assert "C7517" not in rep["text"], rep["text"]  # "wgmma.wait_group is injected … by compiler"
    # the softmax's exp2 is one MUFU.EX2 each (ftz, as Triton's)
    assert "ex2.approx.ftz.f32" in ptx and "ex2.approx.f32" not in ptx


def test_attention_forward_takes_tritons_stages_at_head_dim_128():
    """HEAD_DIM 128, BLOCK_N 128, num_stages 3: Q's tile and its mbarrier, the stages' mbarriers and
    three stages of K and V tiles, 231424 bytes (Triton's kernel: 230400; a margin kept free above
    the stages for a body that needs none left two: each K/V copy then issued just before the
    iteration that reads it)."""
    for causal in (False, True):
        ck = _fwd_ptx(128, 128, 128, 8, causal)
        assert ck.shared == 128 * 128 * 2 + 1024 + 1024 + 3 * 2 * 128 * 128 * 2


@pytest.mark.parametrize("causal", [False, True])
def test_attention_forward_q_lands_in_its_pinned_tile(causal):
    """Q's copy goes straight into the tile the loops' QKᵀ reads (compiler/backend/pinned_tma.py):
    issued before the first loop's K/V prologue copies and waited for after them, so the latencies
    overlap; no registers carry Q out of shared memory and back before the loop."""
    ptx = _fwd_ptx(64, 128, 64, 4, causal).asm["ptx"]
    head = ptx[:ptx.index("wgmma.fence")]
    copies = [m.start() for m in re.finditer(r"cp\.async\.bulk\.tensor\.2d\.shared", head)]
    waits = [m.start() for m in re.finditer(r"mbarrier\.try_wait", head)]
    # Q, then K and V of the prologue's two stages; the first wait (Q's, then the loop's for K) after them
    assert len(copies) == 5 and waits and waits[0] > copies[-1]
    assert "ld.shared" not in head and "st.shared" not in head
    # Q's mbarrier stays for the whole kernel: only the stages' six are invalidated (two loops when causal)
    assert ptx.count("mbarrier.inval") == 6 * (2 if causal else 1)


@pytest.mark.parametrize("head_dim,block_n,num_warps,num_stages", [(64, 64, 4, 2), (128, 128, 8, 2), (128, 64, 4, 2)])
def test_attention_forward_copies_go_out_after_the_first_wait(head_dim, block_n, num_warps, num_stages):
    """With two stages the K/V copies of iteration i+1 are issued once QKᵀ's wait has completed the
    previous iteration's P·V (the last reader of their buffer), before the softmax, not after the
    body: the tiles then have the softmax's time to land instead of none (GPU, 14:15: two-stage
    configs went to 1.03-1.17x Triton)."""
    ck = triton.compile(A._attn_fwd.fn, **{**_fwd_args(head_dim, 128, block_n), "num_warps": num_warps,
                                           "num_stages": num_stages})
    loops = [loop for loop in _wgmma_loops(ck.asm["ptx"]) if "cp.async.bulk.tensor" in loop]
    assert loops
    for loop in loops:
        first_wait = loop.index("wgmma.wait_group")
        second_fence = loop.index("wgmma.fence", first_wait)
        copies = [m.start() for m in re.finditer(r"cp\.async\.bulk\.tensor", loop)]
        assert copies and all(first_wait < c < second_fence for c in copies), loop
        assert loop.count("bar.sync") == 1


@pytest.mark.parametrize("head_dim,block_n,num_warps", [(64, 64, 4), (128, 64, 4), (128, 128, 8)])
def test_attention_forward_copies_go_out_under_pv_with_three_stages(head_dim, block_n, num_warps):
    """With three stages the copies have an iteration to land already: they go out after P·V is
    issued (while it runs), as Triton's, not between QKᵀ's wait and the softmax, where they held the
    softmax up (GPU, 14:15: 128x64 w4 s3 at HEAD_DIM 128, one program an SM, 0.88-0.91x Triton)."""
    ck = triton.compile(A._attn_fwd.fn, **{**_fwd_args(head_dim, 128, block_n), "num_warps": num_warps, "num_stages": 3})
    loops = [loop for loop in _wgmma_loops(ck.asm["ptx"]) if "cp.async.bulk.tensor" in loop]
    assert loops
    for loop in loops:
        last_commit = loop.rindex("wgmma.commit_group")
        copies = [m.start() for m in re.finditer(r"cp\.async\.bulk\.tensor", loop)]
        assert copies and all(c > last_commit for c in copies), loop
        assert loop.count("bar.sync") == 1


def _bwd_ptx(head_dim, causal):
    sig = dict(Q="*fp16", K="*fp16", V="*fp16", sm_scale="fp32", DO="*fp16", DQ="*fp16", DK="*fp16", DV="*fp16",
               M="*fp32", D="*fp32", stride_z="i32", stride_h="i32", stride_tok="i32", stride_d="i32", H="i32", N_CTX="i32")
    cx = dict(BLOCK_M1=32, BLOCK_N1=128, BLOCK_M2=128, BLOCK_N2=32, BLK_SLICE_FACTOR=2, HEAD_DIM=head_dim, CAUSAL=causal)
    div = ("Q", "K", "V", "DO", "DQ", "DK", "DV", "M", "D", "stride_z", "stride_h", "stride_tok", "N_CTX")
    return triton.compile(A._attn_bwd, signature=sig, constexprs=cx, num_warps=4, num_stages=5, target="sm_90",
                          divisible_by_16=div, equal_to_1=("stride_d",)).asm["ptx"]


def _wgmma_loops(ptx: str) -> list[str]:
    from tests.compiler.test_ptx import ptx_loops
    return [loop for loop in ptx_loops(ptx) if "wgmma.mma_async" in loop]


@pytest.mark.parametrize("head_dim,causal", [(64, True), (64, False), (128, True)])
def test_attention_backward_ptx(head_dim, causal):
    """The backward kernel assembles (it spills at HEAD_DIM 128: dk and dv are two 128×128 fp32
    accumulators, 256 registers a thread at 4 warps)."""
    from tests.compiler.test_ptx import ptxas_report
    ptx = _bwd_ptx(head_dim, causal)
    rep = ptxas_report(ptx)
    assert "wgmma.mma_async" in ptx and "ld.global.v4.b32" in ptx
    # dk's wgmma stays in flight over the back edge; its zero start values are set before the loop,
    # not re-made on the zero-trip path into the exit's wait (else ptxas serializes every wgmma)
    assert "C7515" not in rep["text"], rep["text"]


@pytest.mark.parametrize("head_dim,causal", [(64, True), (64, False), (128, True), (128, False)])
def test_attention_backward_loops_are_tritons(head_dim, causal):
    """Each of the backward's loops (dK/dV down the query blocks, dQ along the key blocks; masked and
    unmasked when causal) is pipelined as Triton's: every load through cp.async — the per-row M and
    Delta of the dK/dV loop too, 4-byte copies into the stage, read from there in the layout the
    softmax wants — so nothing in the loop waits on global memory; no layout conversion through
    shared memory (dQ's loop-invariant m and Delta are converted once, before it): two barriers per
    iteration; and two wgmma waits (dV's and dK's dots stay in flight until the next dot's wait)."""
    ptx = _bwd_ptx(head_dim, causal)
    loops = _wgmma_loops(ptx)
    assert len(loops) == (4 if causal else 2)
    row_copies = []
    for loop in loops:
        assert "ld.global" not in loop and "st.shared" not in loop
        assert "cp.async.cg.shared.global" in loop
        assert loop.count("bar.sync") == 2
        assert loop.count("wgmma.wait_group") == 2
        row_copies.append(len(re.findall(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 4,", loop)))
    # M and Delta in the dK/dV loops (the first half); the dQ loops read theirs before the loop
    half = len(loops) // 2
    assert row_copies == [2] * half + [0] * half


@pytest.mark.skipif(_nvdisasm() is None, reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("kernel,head_dim,causal", [("bwd", 64, False), ("bwd", 64, True), ("fwd", 64, False),
                                                    ("fwd", 128, True)])
def test_attention_wgmma_fences_are_the_ptxs(kernel, head_dim, causal, tmp_path):
    """ptxas adds no WARPGROUP.ARRIVE of its own: a wgmma with A from registers (P, dS) gets its
    fragments packed before its wgmma.fence, not between its instructions (where ptxas fenced
    before each one). (HEAD_DIM 128's backward is left out: it spills, and ptxas serializes its
    wgmmas on both compilers.)"""
    import subprocess

    from compiler.ptxas import require as find_ptxas
    if kernel == "bwd":
        ptx = _bwd_ptx(head_dim, causal)
    else:
        ptx = _fwd_ptx(head_dim, 128, 64 if head_dim == 64 else 128, 4 if head_dim == 64 else 8, causal).asm["ptx"]
    (tmp_path / "k.ptx").write_text(ptx)
    subprocess.run([find_ptxas(), "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")], check=True)
    sass = subprocess.run([_nvdisasm(), "-c", str(tmp_path / "k.cubin")], check=True, capture_output=True, text=True).stdout
    assert sass.count("WARPGROUP.ARRIVE") == ptx.count("wgmma.fence.sync.aligned")
    assert sass.count("WARPGROUP.DEPBAR") == ptx.count("wgmma.wait_group")


@pytest.mark.skipif(_nvdisasm() is None, reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("head_dim,block_n,num_warps,num_stages", [(128, 64, 4, 2), (64, 64, 4, 3)])
def test_attention_forward_copies_are_issued_without_branches(head_dim, block_n, num_warps, num_stages, tmp_path):
    """Q's and the loop's K/V copies are predicated on the lane elect.sync picks in warp 0, not a
    branch around thread 0's copies: ptxas issues each once from the warp (`@UPx UTMALDG`), without
    the reconvergence (BSSY/BSYNC) and the per-lane loop (BRA.U.ANY) it put around each copy before."""
    import subprocess

    from compiler.ptxas import require as find_ptxas
    ck = triton.compile(A._attn_fwd.fn, **{**_fwd_args(head_dim, 128, block_n), "num_warps": num_warps,
                                           "num_stages": num_stages})
    ptx = ck.asm["ptx"]
    assert "elect.sync" in ptx
    (tmp_path / "k.ptx").write_text(ptx)
    subprocess.run([find_ptxas(), "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")], check=True)
    sass = subprocess.run([_nvdisasm(), "-c", str(tmp_path / "k.cubin")], check=True, capture_output=True, text=True).stdout
    loads = [ln for ln in sass.splitlines() if "UTMALDG" in ln]
    # Q once, the prologue's and the loop's K and V (two panels each at HEAD_DIM 128)
    assert len(loads) == (1 + 2 * (num_stages - 1) + 2) * (head_dim // 64)
    assert "BRA.U.ANY" not in sass and all("@UP" in ln for ln in loads)


# -- GPU ------------------------------------------------------------------------------------------

@pytest.fixture
def cuda_gen():
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    return torch.Generator().manual_seed(seed)


def _poison_next_allocations(q, count):
    """The autograd Function allocates its outputs itself (torch.empty_like): fill `count` blocks of
    q's size (and of M's) with NaN and free them, so that the caching allocator hands those blocks
    out next and anything a kernel leaves unwritten shows as NaN."""
    blocks = [torch.full_like(q, float("nan")) for _ in range(count)]
    blocks += [torch.full(q.shape[:3], float("nan"), device=q.device) for _ in range(2)]
    del blocks


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("HEAD_DIM", [64, 128])
@pytest.mark.parametrize("host_descriptors", [None, False])
def test_attention_forward_gpu(cuda_gen, dtype, causal, HEAD_DIM, host_descriptors):
    q, k, v = _inputs(cuda_gen, (2, 3, 1024, HEAD_DIM), dtype, "cuda")
    _poison_next_allocations(q, 1)
    got = A.attention(q, k, v, causal, 0.5, False, host_descriptors)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.5)
    ref = _reference(q, k, v, causal, 0.5, torch.zeros_like(q))[0]
    assert not got.isnan().any()
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    torch.testing.assert_close(got.float(), ref, atol=tol, rtol=0)
    torch.testing.assert_close(got, sdpa, atol=tol, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("HEAD_DIM,BLOCK_M,BLOCK_N,num_warps,num_stages", [
    (128, 128, 128, 8, 3), (128, 128, 128, 8, 2), (64, 128, 64, 4, 3), (64, 64, 32, 4, 4)])
def test_attention_forward_gpu_at_benchmark_configs(cuda_gen, monkeypatch, causal, HEAD_DIM, BLOCK_M, BLOCK_N,
                                                    num_warps, num_stages):
    """The benchmark's configs beside the one the tests tune with: three K/V stages filling shared
    memory at HEAD_DIM 128, two stages (the next copies issued right after QKᵀ's wait), more
    stages than the causal diagonal loop has iterations; Q landing in its pinned tile in each."""
    cfg = next(c for c in A._all_configs() if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
               == (BLOCK_M, BLOCK_N, num_warps, num_stages))
    monkeypatch.setattr(A._attn_fwd, "configs", [cfg])
    monkeypatch.setattr(A._attn_fwd, "cache", {})
    q, k, v = _inputs(cuda_gen, (2, 3, 1024, HEAD_DIM), torch.float16, "cuda")
    _poison_next_allocations(q, 1)
    got = A.attention(q, k, v, causal, 0.5, False, True)
    ref = _reference(q, k, v, causal, 0.5, torch.zeros_like(q))[0]
    assert not got.isnan().any()
    torch.testing.assert_close(got.float(), ref, atol=1e-2, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("HEAD_DIM", [64, 128])
def test_attention_backward_gpu(cuda_gen, dtype, causal, HEAD_DIM):
    q, k, v = _inputs(cuda_gen, (2, 3, 1024, HEAD_DIM), dtype, "cuda")
    _poison_next_allocations(q, 4)
    _check(q, k, v, causal, 0.5, None, "bwd", None)


@pytest.mark.parametrize("m,k,num_warps", [(128, 64, 4), (128, 128, 8), (64, 32, 4), (256, 64, 8)])
def test_wgmma_register_a_fragments_match_the_ptx_table(m, k, num_warps):
    """The registers the lowering passes as wgmma's A (P of attention, held in the accumulator
    layout of an [M, K] wgmma) hold the elements the PTX ISA's A-fragment table assigns to each
    lane: a0,a1 (g, 2t..) a2,a3 (g+8, 2t..) a4,a5 (g, 2t+8..) a6,a7 (g+8, 2t+8..) of the warp's
    16 rows within its warpgroup's 64-row block."""
    from compiler.backend.dot_layouts import wgmma_acc_layout, wgmma_config
    from compiler.backend.wgmma import a_fragment_registers
    lay = wgmma_acc_layout(m, k, num_warps)
    wg_m, wg_n, _, reps = wgmma_config(m, k, num_warps)
    assert wg_n == 1
    for warp in range(num_warps):
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for rep in range(reps):
                row0 = rep * 64 * wg_m + 64 * (warp // 4) + 16 * (warp % 4)
                for k0 in range(0, k, 16):
                    regs = a_fragment_registers(k, rep, k0)
                    want = [(row0 + g + 8 * ((i // 2) % 2), k0 + 2 * t + i % 2 + 8 * (i // 4)) for i in range(8)]
                    assert [lay.coord(r, lane, warp) for r in regs] == want
