"""compiler/backend/multi_dot.py: loops whose wgmma operands are loaded in the body through a
`tl.trans` (or feed several dots) are pipelined with cp.async; with the pipeline switched off the
same kernels stage their operands through registers. Attention's loops: tests/compiler/test_attention.py."""
from __future__ import annotations

import re

import pytest

import compiler as triton
import compiler.language as tl
from compiler.backend import pipeline
from test_dot_mma import compile_dot, report


@pytest.mark.parametrize("trans_a,trans_b", [(1, 0), (0, 1), (1, 1)])
def test_transposed_operand_loads_are_pipelined(trans_a, trans_b):
    ptx = compile_dot("fp16", 128, 128, 32, 4, trans_a=trans_a, trans_b=trans_b, target="sm_90a").asm["ptx"]
    assert "wgmma.mma_async" in ptx
    # num_stages 3: two stages copied ahead in the prologue, one more each iteration; a group per tile
    assert len(re.findall(r"cp\.async\.commit_group", ptx)) == 3 * 2
    assert "ld.global" not in ptx.split("cp.async.wait_group")[1].split("wgmma.fence")[0]
    _, spills, _ = report(ptx, "sm_90a")
    assert spills == 0


def test_without_the_pipeline_transposed_operands_go_through_registers(monkeypatch):
    monkeypatch.setenv("BLOCKTUNE_NO_PIPELINE", "1")
    ptx = compile_dot("fp16", 128, 128, 32, 4, trans_a=1, trans_b=1, target="sm_90a").asm["ptx"]
    assert "cp.async" not in ptx and "wgmma.mma_async" in ptx


@triton.jit
def _two_dots_with_column_sums(Q, K, V, O, S, N, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    # attention's loop shape with a reduction across the warps in the body: scratch above the stages
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :])
    acc = tl.zeros([BM, D], dtype=tl.float32)
    colsum = tl.zeros([BN], dtype=tl.float32)
    for start in range(0, N, BN):
        k = tl.load(K + (start + offs_n)[:, None] * D + offs_d[None, :])
        v = tl.load(V + (start + offs_n)[:, None] * D + offs_d[None, :])
        s = tl.dot(q, k.T)
        colsum += tl.sum(s, 0)
        acc = tl.dot(s.to(tl.float16), v, acc)
    tl.store(O + offs_m[:, None] * D + offs_d[None, :], acc)
    tl.store(S + offs_n, colsum)


@pytest.mark.parametrize("block_n,num_stages,stages", [(64, 6, 6), (128, 3, 2)])
def test_stages_fill_shared_memory_unless_the_body_needs_room(block_n, num_stages, stages):
    """No room is kept free above a loop's stages at first (Triton's stages take what the tiles
    allow): 6 stages of 32 KiB fit beside Q's 32 KiB tile and the body's 2 KiB of scratch (a 16 KiB
    margin allowed 5). Where the body's scratch then does not fit (3 stages of 64 KiB), the kernel is
    lowered again with the margin: 2 stages, within the device's shared memory."""
    sig = dict(Q="*fp16", K="*fp16", V="*fp16", O="*fp32", S="*fp32", N="i32")
    ck = triton.compile(_two_dots_with_column_sums, signature=sig, constexprs=dict(BM=128, BN=block_n, D=128),
                        num_warps=8, num_stages=num_stages, target="sm_90a", divisible_by_16=tuple(sig)[:-1])
    ptx = ck.asm["ptx"]
    assert "wgmma.mma_async" in ptx
    # the prologue copies stages - 1 iterations ahead, each iteration one more: a group a tile (K, V)
    assert len(re.findall(r"cp\.async\.commit_group", ptx)) == 2 * stages
    assert 128 * 128 * 2 + stages * 2 * block_n * 128 * 2 <= ck.shared <= pipeline.SMEM_LIMIT
    _, spills, _ = report(ptx, "sm_90a")
    assert spills == 0
