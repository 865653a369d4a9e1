"""tl.range(..., num_stages=S) on a loop without a dot: its loads go through S-1 cp.async stages
in shared memory, as Triton's pipeliner does (compiler/backend/load_pipeline.py) — the shared
memory Triton's kernel needs (the numbers below are Triton 3.6's metadata["shared"] for the same
kernels on sm_90), and OutOfResources at launch where that is too much (Triton's test_hooks).
PTX through ptxas here; results, and the error, on the GPU."""
from __future__ import annotations

import re

import pytest
import torch

import compiler as triton
from compiler import ptxas
from tests.compiler.kernels import load_pipeline as K
from tests.compiler.kernels.util import gen, interpret  # noqa: F401

COPY_SIG = dict(src="*fp32", N="i32")


def _copy(stages, block):
    return triton.compile(K.copy_in_place_kernel, signature=COPY_SIG, constexprs=dict(N_STAGES=stages, BLOCK_SIZE=block),
                          num_warps=4, target="sm_90", divisible_by_16=("src", "N"))


@pytest.mark.parametrize("stages,block,shared", [(4, 32, 384), (3, 1024, 8192), (2, 128, 512), (100, 32, 12672),
                                                 (100, 4096, 1622016)])
def test_stages_take_tritons_shared_memory(stages, block, shared):
    ck = _copy(stages, block)
    ptx = ck.asm["ptx"]
    assert ck.metadata["shared"] == shared
    # the loop waits for its own copies while the next S-2 iterations' stay in flight
    assert re.findall(r"cp\.async\.wait_group\s+(\d+);", ptx) == [str(stages - 2), "0"]
    assert "cp.async" in ptx and ptx.count("cp.async.commit_group") == stages
    if shared <= 227 * 1024:
        ptxas.report(ptx)


def test_one_stage_or_no_num_stages_is_not_pipelined():
    assert "cp.async" not in _copy(1, 128).asm["ptx"] and _copy(1, 128).metadata["shared"] == 0
    ck = triton.compile(K.plain_range_kernel, signature=dict(X="*fp32", Out="*fp32", n_rows="i32"),
                        constexprs=dict(BLOCK=256), num_warps=4, num_stages=3, target="sm_90", divisible_by_16=("X", "Out"))
    assert "cp.async" not in ck.asm["ptx"]
    ck = triton.compile(K.other_value_kernel, signature=dict(X="*fp32", Out="*fp32", n_rows="i32", n_cols="i32"),
                        constexprs=dict(BLOCK=256), num_warps=4, target="sm_90", divisible_by_16=("X", "Out"))
    assert "cp.async" not in ck.asm["ptx"]


AXPY_SIG = dict(X="*fp16", Y="*fp16", Out="*fp16", n_rows="i32", n_cols="i32", stride="i32", alpha="fp32")


@pytest.mark.parametrize("stages", [2, 3, 5])
def test_two_loads_a_row_assemble(stages):
    ck = triton.compile(K.axpy_rows_kernel, signature=AXPY_SIG, constexprs=dict(STAGES=stages, BLOCK=256), num_warps=4,
                        target="sm_90", divisible_by_16=("X", "Y", "Out", "stride", "n_cols"))
    assert ck.metadata["shared"] == (stages - 1) * 2 * 256 * 2
    assert "cp.async.ca.shared.global" in ck.asm["ptx"]    # a thread's two halves a copy
    assert "0 bytes spill stores" in ptxas.report(ck.asm["ptx"])


def test_copies_under_4_bytes_are_not_pipelined():
    """A ragged fp16 row (n_cols not a multiple of 16) is masked element by element: 2-byte
    accesses, which cp.async cannot copy — Triton leaves such loads alone too (width < 32 bits)."""
    ck = triton.compile(K.axpy_rows_kernel, signature=AXPY_SIG, constexprs=dict(STAGES=3, BLOCK=256), num_warps=4,
                        target="sm_90", divisible_by_16=("X", "Y", "Out", "stride"))
    assert "cp.async" not in ck.asm["ptx"] and ck.metadata["shared"] == 0


MAX_SIG = dict(X="*fp32", Out="*fp32", n_blocks="i32")


def test_the_bodys_own_shared_memory_sits_above_the_stages():
    ck = triton.compile(K.column_max_kernel, signature=MAX_SIG, constexprs=dict(STAGES=3, R=32, C=64),
                        num_warps=4, target="sm_90", divisible_by_16=("X", "Out"))
    stages_bytes = 2 * 32 * 64 * 4
    assert "cp.async" in ck.asm["ptx"] and ck.metadata["shared"] > stages_bytes
    ptxas.report(ck.asm["ptx"])


def _column_max_reference(x):
    return x.amax(dim=0)


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("n_blocks", [1, 3, 50])
def test_column_max_gpu(gen, stages, n_blocks):
    x = torch.randn(n_blocks * 32, 64, generator=gen)
    out = torch.full((64,), float("nan"), device="cuda")
    K.column_max_kernel[(1,)](x.cuda(), out, n_blocks, STAGES=stages, R=32, C=64)
    torch.testing.assert_close(out.cpu(), _column_max_reference(x), atol=0, rtol=0)


def test_column_max_interpreted(interpret, gen):
    x = torch.randn(5 * 32, 64, generator=gen)
    out = torch.full((64,), float("nan"))
    K.column_max_kernel[(1,)](x, out, 5, STAGES=3, R=32, C=64)
    torch.testing.assert_close(out, _column_max_reference(x), atol=0, rtol=0)


def _axpy_reference(x, y, alpha, programs):
    n_rows, n_cols = x.shape
    out = (alpha * x.double() + y.double())
    sums = torch.zeros(programs, x.shape[1], dtype=torch.float64)
    for p in range(programs):
        sums[p] = x[p::programs].double().sum(0)
    return out, sums


def _run_axpy(x, y, alpha, programs, stages, block, device):
    n_rows, n_cols = x.shape
    buf = torch.full((n_rows + programs, block), float("nan"), dtype=x.dtype, device=device)
    xp = torch.zeros((n_rows, block), dtype=x.dtype, device=device)
    yp = torch.zeros((n_rows, block), dtype=x.dtype, device=device)
    xp[:, :n_cols], yp[:, :n_cols] = x, y
    K.axpy_rows_kernel[(programs,)](xp, yp, buf, n_rows, n_cols, block, alpha, STAGES=stages, BLOCK=block)
    return buf[:n_rows, :n_cols].cpu(), buf[n_rows:, :n_cols].cpu()


@pytest.mark.parametrize("stages", [2, 4])
def test_rows_loop_interpreted(interpret, gen, stages):
    x = torch.randn(13, 100, generator=gen).half()
    y = torch.randn(13, 100, generator=gen).half()
    out, sums = _run_axpy(x, y, 0.5, 3, stages, 128, "cpu")
    ref_out, ref_sums = _axpy_reference(x, y, 0.5, 3)
    torch.testing.assert_close(out.double(), ref_out, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(sums.double(), ref_sums, atol=2e-2, rtol=2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [2, 3, 6])
@pytest.mark.parametrize("n_rows,programs", [(1, 1), (37, 4), (1000, 132)])
@pytest.mark.parametrize("dtype,n_cols", [(torch.float16, 192), (torch.float32, 200)])
def test_rows_loop_gpu(gen, stages, n_rows, programs, dtype, n_cols):
    x = torch.randn(n_rows, n_cols, generator=gen).to(dtype)
    y = torch.randn(n_rows, n_cols, generator=gen).to(dtype)
    out, sums = _run_axpy(x.cuda(), y.cuda(), -1.5, programs, stages, 256, "cuda")
    ref_out, ref_sums = _axpy_reference(x, y, -1.5, programs)
    torch.testing.assert_close(out.double(), ref_out, atol=4e-3, rtol=2e-3)
    torch.testing.assert_close(sums.double(), ref_sums, atol=5e-2, rtol=2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("stages,block", [(2, 32), (4, 32), (100, 32), (3, 1024)])
@pytest.mark.parametrize("n", [4096, 1000])
def test_copy_in_place_gpu(gen, stages, block, n):
    src = torch.randn(n, generator=gen).cuda()
    want = src.clone()
    K.copy_in_place_kernel[(1,)](src, n, N_STAGES=stages, BLOCK_SIZE=block)
    torch.cuda.synchronize()
    assert torch.equal(src, want)


@pytest.mark.gpu
def test_too_many_stages_are_out_of_resources_gpu():
    """Triton's test_hooks: 100 stages of 4096 floats need 1.6 MB of shared memory."""
    src = torch.zeros(4096, device="cuda")
    with pytest.raises(triton.OutOfResources, match="shared memory"):
        K.copy_in_place_kernel[(1,)](src, 4096, N_STAGES=100, BLOCK_SIZE=4096)


@pytest.mark.gpu
def test_autotuner_hooks_hear_of_the_out_of_resources_gpu():
    """Triton's test_hooks, rewritten: the 4096-wide config fails at launch, its post_hook hears
    of it, the tuner takes the other."""
    state = {"open": 0, "errors": []}

    def pre_hook(*args, **kwargs):
        state["open"] += 1

    def post_hook(*args, exception):
        state["open"] -= 1
        assert state["open"] == 0
        if exception is not None:
            state["errors"].append(exception)

    configs = [triton.Config(kwargs={"BLOCK_SIZE": 4096}), triton.Config(kwargs={"BLOCK_SIZE": 32})]
    tuned = triton.autotune(configs=configs, key=["N"], pre_hook=pre_hook, post_hook=post_hook)(
        triton.heuristics({"N_STAGES": lambda nargs: 100 if nargs["N"] == 4096 else 4})(K.copy_in_place_kernel))
    src = torch.randn(4096, device="cuda")
    want = src.clone()
    tuned[(1,)](src, 4096)
    torch.cuda.synchronize()
    (err,) = state["errors"]
    assert isinstance(err, triton.OutOfResources)
    assert tuned.best_config.kwargs["BLOCK_SIZE"] == 32 and torch.equal(src, want)
