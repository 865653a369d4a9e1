"""Warp-specialized TMA loops (compiler/backend/warp_specialize.py): `tl.range(..., warp_specialize=True)`
and knobs.codegen.warp_specialize give the kernel a producer warpgroup that feeds the consumers'
wgmmas through full/empty mbarriers. The PTX (assembled with ptxas: setmaxnreg honoured, no
spills), interpret mode unchanged, and on the GPU against torch in float64 (fresh random inputs,
outputs poisoned with NaN, zero-iteration loops; a barrier bug hangs the GPU: a thread timeout
ends the process)."""
from __future__ import annotations

import math
from pathlib import Path
import re

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler.errors import CompilationError
from compiler.tools.tensor_descriptor import TensorDescriptor
from tests.compiler.kernels import tma as T
from tests.compiler.kernels import warp_specialize as K
from tests.compiler.kernels.attention import attention_kernels as A
from tests.compiler.kernels.util import gen, interpret  # noqa: F401 - fixtures
from tests.compiler.test_attention import _fwd_ptx
from tests.compiler.test_tma import _desc_type as _desc
from tests.compiler.test_runtime import FakeTensor, _fresh, cache_dir, fake_cuda, fake_tensor_maps  # noqa: F401

LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"


def _matmul_sig(dtype="fp16", bm=128, bn=128, bk=64):
    return {"a_desc": _desc(dtype, (bm, bk)), "b_desc": _desc(dtype, (bn, bk)), "c_desc": _desc(dtype, (bm, bn)),
            "M": "i32", "N": "i32", "K": "i32"}


def _assembled(ck):
    from tests.compiler.test_ptx import ptxas_report
    rep = ptxas_report(ck.asm["ptx"])
    assert rep["spills"] == 0 and rep["stack"] == 0, rep["text"]
    assert "C7508" not in rep["text"], rep["text"]   # setmaxnreg ignored
    return ck.asm["ptx"], rep


def _check_roles(ptx: str, num_warps: int, consumer_regs: int | None):
    threads = 32 * (num_warps + 4)
    assert f".maxntid {threads}" in ptx and ".minnctapersm 1" in ptx
    # the roles: one branch each, the producer giving registers to the consumers
    if consumer_regs is None:
        assert "setmaxnreg" not in ptx
    else:
        assert ptx.count("setmaxnreg.dec.sync.aligned.u32 40;") == 1
        assert ptx.count(f"setmaxnreg.inc.sync.aligned.u32 {consumer_regs};") == 1
    # every bar.sync 0 counts the consumers alone; the fork/join barrier counts everyone
    assert not re.search(r"bar\.sync \t0;", ptx)
    assert re.search(rf"bar\.sync \t0, {32 * num_warps};", ptx)
    assert re.search(rf"barrier\.sync \t1, {threads};", ptx)
    # the hand-off words live in the dynamic shared memory: a static array would move its start off
    # the 1024-byte alignment of the TMA tiles (the GPU then faults: misaligned address)
    assert re.findall(r"^\s*(?:\.extern )?\.shared .*$", ptx, re.M) == [".extern .shared .align 16 .b8 global_smem[];"]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("num_warps,consumer_regs", [(4, 256), (8, 232)])
def test_matmul_ws_ptx(dtype, num_warps, consumer_regs):
    ck = triton.compile(K.matmul_ws_kernel, signature=_matmul_sig(dtype), constexprs={"WARP_SPECIALIZE": True},
                        num_warps=num_warps, num_stages=3, target="sm_90")
    ptx, rep = _assembled(ck)
    assert ck.metadata["num_warps"] == num_warps and ck.metadata["launch_warps"] == num_warps + 4
    _check_roles(ptx, num_warps, consumer_regs)
    # three full barriers (one arrival: the producer's expect_tx) and three empty ones (one
    # arrival per consumer warp), made for the loop and invalidated after it
    assert ptx.count("mbarrier.init.shared::cta.b64") == 6
    assert len(re.findall(rf"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], {num_warps};", ptx)) == 3
    assert ptx.count("mbarrier.inval.shared::cta.b64") == 6
    # only the producer copies (no prologue in the consumers' code); the consumers release stages
    assert "mbarrier.arrive.expect_tx" in ptx and LOAD in ptx
    consumer = ptx.split("setmaxnreg.inc")[1] if consumer_regs else ptx
    assert "@p mbarrier.arrive.shared::cta.b64" in consumer
    # the wgmma stays in flight over the back edge: wait_group 1 in the loop, 0 after it
    assert "wgmma.wait_group.sync.aligned 1;" in ptx and "wgmma.wait_group.sync.aligned 0;" in ptx


def test_launch_adds_the_producer_warps(fake_cuda, fake_tensor_maps):
    """Through the real launch path (a fake libcuda): the block is 32 · (num_warps + 4) threads when
    the loop is specialized, 32 · num_warps when not; the two compile apart (the constexpr)."""
    k = _fresh(K.matmul_ws_kernel)
    descs = [TensorDescriptor(FakeTensor(0x7F0000001000 + 0x100000 * i, "float16"), [256, 256], [256, 1], block)
             for i, block in enumerate(([128, 64], [128, 64], [128, 128]))]
    for ws, threads in ((True, 384), (False, 256)):
        ck = k[(2, 2)](*descs, 256, 256, 256, WARP_SPECIALIZE=ws, num_warps=8)
        assert fake_cuda.fake_grid(3) == threads and ck.metadata["num_warps"] == 8
        assert fake_cuda.fake_grid(6) == ck.metadata["shared"] > 0
    assert k.compile_count == 2


def test_unmarked_loop_is_not_specialized():
    ck = triton.compile(K.matmul_ws_kernel, signature=_matmul_sig(), constexprs={"WARP_SPECIALIZE": False},
                        num_warps=8, num_stages=3, target="sm_90")
    ptx = ck.asm["ptx"]
    assert "launch_warps" not in ck.metadata and "setmaxnreg" not in ptx and ".maxntid 256" in ptx
    assert "barrier.sync \t1" not in ptx and ".minnctapersm" not in ptx


def test_knob_specializes_every_tma_loop(monkeypatch):
    """BLOCKTUNE_WARP_SPECIALIZE=1: h/tma's unmarked tutorial loop too; the knob is in the cache key."""
    sig = _matmul_sig()
    plain = triton.compile(T.matmul_tma_kernel, signature=sig, num_warps=8, num_stages=3, target="sm_90")
    monkeypatch.setenv("BLOCKTUNE_WARP_SPECIALIZE", "1")
    ck = triton.compile(T.matmul_tma_kernel, signature=sig, num_warps=8, num_stages=3, target="sm_90")
    assert ck.metadata["cache_key"] != plain.metadata["cache_key"]
    assert ck.metadata["launch_warps"] == 12
    ptx, _ = _assembled(ck)
    _check_roles(ptx, 8, 232)


def test_num_warps_not_a_warpgroup_multiple_is_not_specialized():
    ck = triton.compile(K.matmul_ws_kernel, signature=_matmul_sig(bm=64, bn=64), constexprs={"WARP_SPECIALIZE": True},
                        num_warps=2, num_stages=3, target="sm_90")
    assert "launch_warps" not in ck.metadata and "setmaxnreg" not in ck.asm["ptx"]


def test_persistent_device_descriptors_ptx():
    """Tutorial 09's mark on the loop over tiles specializes the K loop inside it: a fork and join
    per tile; the producer acquires the in-kernel maps before copying through them."""
    ck = triton.compile(K.device_matmul_persistent_ws_kernel,
                        signature={"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"},
                        constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_PROGRAMS": 132,
                                    "WARP_SPECIALIZE": True},
                        num_warps=8, num_stages=4, target="sm_90", divisible_by_16=("a_ptr", "b_ptr", "c_ptr", "M", "N", "K"))
    ptx, _ = _assembled(ck)
    _check_roles(ptx, 8, 232)
    producer = ptx.split("setmaxnreg.dec")[1].split("setmaxnreg.inc")[0]
    assert producer.count("fence.proxy.tensormap::generic.acquire.gpu") == 2 and LOAD in producer
    assert ptx.count("tensormap.cp_fenceproxy") == 3 and ptx.count("mbarrier.init.shared::cta.b64") == 8


@pytest.mark.parametrize("head_dim,block_m,block_n,num_warps,causal,host", [
    (64, 128, 64, 4, False, True), (64, 128, 64, 8, True, True), (128, 128, 64, 8, True, False),
    (128, 128, 128, 8, False, True)])
def test_attention_forward_ws_ptx(head_dim, block_m, block_n, num_warps, causal, host):
    ck = _fwd_ptx(head_dim, block_m, block_n, num_warps, causal, host, warp_specialize=True)
    ptx, _ = _assembled(ck)
    _check_roles(ptx, num_warps, 256 if num_warps == 4 else 232)
    # causal runs two loops (off the diagonal, then on it): a fork and a join each, and the exit
    loops = 2 if causal else 1
    assert len(re.findall(r"barrier\.sync \t1, ", ptx)) == 2 * loops + 1 + loops + 1   # + the producer's
    stage_barriers = ptx.count("mbarrier.init.shared::cta.b64") - 1   # past Q's own: full and empty per stage
    assert stage_barriers % (2 * loops) == 0 and stage_barriers // (2 * loops) in (2, 3)   # 3, or what fits
    assert "ld.global" not in ptx and "@p mbarrier.arrive.shared::cta.b64" in ptx


def test_warp_specialize_must_be_constexpr():
    @triton.jit
    def runtime_flag(X, n, flag):
        acc = 0.0
        for i in tl.range(n, warp_specialize=flag > 0):
            acc += tl.load(X + i)
        tl.store(X, acc)

    with pytest.raises(CompilationError, match="warp_specialize=.*must be a constexpr"):
        triton.compile(runtime_flag, signature={"X": "*fp32", "n": "i32", "flag": "i32"}, target="sm_90")


def test_interpret_matmul_ws(interpret, gen):
    """Interpret mode runs the marked loop as it is (the mark changes no result)."""
    a = torch.randn(200, 72, generator=gen).half()
    b = torch.randn(136, 72, generator=gen).half()
    c = torch.full((200, 136), float("nan")).half()
    descs = (TensorDescriptor.from_tensor(a, [64, 32]), TensorDescriptor.from_tensor(b, [64, 32]),
             TensorDescriptor.from_tensor(c, [64, 64]))
    K.matmul_ws_kernel[(4, 3)](*descs, 200, 136, 72, WARP_SPECIALIZE=True, num_warps=4)
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, atol=2e-2 * math.sqrt(72), rtol=2e-2)


# -- GPU ------------------------------------------------------------------------------------------

def _nan(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


# every row a multiple of 16 bytes, as TMA needs (M and the tiles need not divide)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,Kd,num_warps,stages", [
    (1024, 1024, 1024, 8, 3), (1000, 776, 392, 8, 4),   # K a multiple of BLOCK_K, and not (392 = 6·64 + 8)
    (333, 520, 1000, 4, 3), (256, 256, 64, 8, 3),        # one iteration: fewer than the stages
    (200, 304, 0, 8, 3)])                                # K = 0: loops of zero iterations, C = 0
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_matmul_ws_gpu(gen, dtype, M, N, Kd, num_warps, stages):
    cols = max(Kd, 8)   # K = 0: a descriptor still needs 16-byte rows; the kernel reads none of them
    a = torch.randn(M, cols, generator=gen).to("cuda", dtype)
    b = torch.randn(N, cols, generator=gen).to("cuda", dtype)
    ref = a[:, :Kd].double() @ b[:, :Kd].double().T
    c = _nan((M, N), dtype)
    descs = (TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [128, 64]),
             TensorDescriptor.from_tensor(c, [128, 128]))
    grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
    for _ in range(2):  # the second launch takes the cached launcher
        ck = K.matmul_ws_kernel[grid](*descs, M, N, Kd, WARP_SPECIALIZE=True, num_warps=num_warps, num_stages=stages)
    torch.cuda.synchronize()
    assert ck.metadata["launch_warps"] == num_warps + 4   # the loop was specialized
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    torch.testing.assert_close(c.double(), ref, atol=tol * math.sqrt(max(Kd, 1)), rtol=tol)


@pytest.mark.parametrize("bm,bn,bk,num_warps,stages", [
    (128, 256, 64, 8, 3), (128, 128, 128, 4, 2),   # B in two 128-byte panels; A and B in two each
    (128, 256, 128, 8, 2), (64, 128, 64, 4, 4)])
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_matmul_ws_tiles_gpu(gen, bm, bn, bk, num_warps, stages):
    M, N, Kd = 777, 1024, 520
    a = torch.randn(M, Kd, generator=gen).to("cuda", torch.float16)
    b = torch.randn(N, Kd, generator=gen).to("cuda", torch.float16)
    c = _nan((M, N), torch.float16)
    descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bn, bk]),
             TensorDescriptor.from_tensor(c, [bm, bn]))
    ck = K.matmul_ws_kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](*descs, M, N, Kd, WARP_SPECIALIZE=True,
                                                                      num_warps=num_warps, num_stages=stages)
    torch.cuda.synchronize()
    assert ck.metadata["launch_warps"] == num_warps + 4
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, atol=2e-2 * math.sqrt(Kd), rtol=2e-2)


# N and K multiples of 16, so that the specialization proves the 16-byte row alignment TMA needs
@pytest.mark.parametrize("M,N,Kd,programs", [(1024, 1024, 1024, 132), (1000, 784, 400, 7), (256, 128, 64, 3),
                                             (96, 112, 208, 9)])   # more programs than tiles: some run none
@pytest.mark.gpu
@pytest.mark.timeout(120, method="thread")
def test_persistent_device_descriptors_ws_gpu(gen, M, N, Kd, programs):
    a = torch.randn(M, Kd, generator=gen).to("cuda", torch.float16)
    b = torch.randn(N, Kd, generator=gen).to("cuda", torch.float16)
    ref = a.double() @ b.double().T
    c = _nan((M, N), torch.float16)
    ck = K.device_matmul_persistent_ws_kernel[(programs,)](a, b, c, M, N, Kd, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                                                          NUM_PROGRAMS=programs, WARP_SPECIALIZE=True, num_warps=8,
                                                          num_stages=3)
    torch.cuda.synchronize()
    assert ck.metadata["launch_warps"] == 12
    torch.testing.assert_close(c.double(), ref, atol=2e-2 * math.sqrt(Kd), rtol=2e-2)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("HEAD_DIM", [64, 128])
@pytest.mark.parametrize("host_descriptors", [None, True])   # None: in-kernel descriptors on Hopper, as the tutorial
@pytest.mark.gpu
@pytest.mark.timeout(300, method="thread")
def test_attention_forward_ws_gpu(gen, causal, HEAD_DIM, host_descriptors):
    q, k, v = (torch.randn((2, 3, 1024, HEAD_DIM), generator=gen).to("cuda", torch.float16) for _ in range(3))
    blocks = [torch.full_like(q, float("nan")) for _ in range(2)]   # the output takes one of these
    del blocks
    got = A.attention(q, k, v, causal, 0.5, True, host_descriptors)
    torch.cuda.synchronize()
    s = (q.double() @ k.double().transpose(-1, -2)) * 0.5
    if causal:
        s = s.masked_fill(torch.ones(1024, 1024, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ref = torch.softmax(s, dim=-1) @ v.double()
    assert not got.isnan().any()
    torch.testing.assert_close(got.double(), ref, atol=1e-2, rtol=0)


def test_the_tuner_searches_warp_specialize():
    """examples/specs/matmul_descriptor.yaml: WARP_SPECIALIZE is a meta-parameter of the space (a
    categorical for Optuna), and the tuner's compile step gives its two values two kernels."""
    import optuna
    import yaml

    from jobspec.model import JobSpec
    from tuner.compile_step import compile_config
    from tuner.space import SearchSpace

    raw = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "specs" / "matmul_descriptor.yaml").read_text())
    space = SearchSpace.from_spec(JobSpec.model_validate(raw))
    assert space.distributions()["WARP_SPECIALIZE"] == optuna.distributions.CategoricalDistribution((False, True))
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}
    warps = {}
    for ws in (False, True):
        cx = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, WARP_SPECIALIZE=ws, **raw["constants"])
        out = compile_config(raw["kernel"]["source"], raw["kernel"]["name"], sig, cx, 8, 4, "sm_90", tuple(sig), (),
                             232448, False)
        assert out["status"] == "ok", out.get("error")
        warps[ws] = out["compiled"].metadata.get("launch_warps", out["compiled"].metadata["num_warps"])
    assert warps == {False: 8, True: 12}
