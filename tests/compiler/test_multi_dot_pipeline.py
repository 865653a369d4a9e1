"""compiler/backend/multi_dot.py: loops whose wgmma operands are loaded in the body through a
`tl.trans` (or feed several dots) are pipelined with cp.async; with the pipeline switched off the
same kernels stage their operands through registers. Attention's loops: tests/compiler/test_attention.py."""
from __future__ import annotations

import re

import pytest

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
