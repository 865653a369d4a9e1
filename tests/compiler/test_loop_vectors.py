"""Row vectors in loops (compiler/backend/lowering.py, multi_dot.py): a loop-invariant vector's
conversion to the layout its broadcast needs is made once, ahead of the loop; a vector loaded in a
pipelined loop of wgmma dots travels through cp.async with the tiles and is read from its stage
(attention's backward: tests/compiler/test_attention.py). PTX through ptxas here, results on the GPU."""
from __future__ import annotations

import re

import pytest
import torch

from tests.compiler.kernels import loop_vectors as K
from tests.compiler.kernels.util import gen, interpret  # noqa: F401
from tests.compiler.test_attention import _wgmma_loops
from tests.compiler.test_ptx import ptx_loops, ptxas_report

import compiler as triton

SUM_SIG = dict(X="*fp32", R="*fp32", Y="*fp32", n_blocks="i32")
DOT_SIG = dict(A="*fp16", B="*fp16", C="*fp16", S="*fp32", Out="*fp32", n_rows="i32")
DOT_CX = dict(BM=128, BK=64, BN=64, N_PAD=256)


def test_invariant_broadcast_is_converted_before_the_loop():
    ptx = triton.compile(K.row_scaled_sum_kernel, signature=SUM_SIG, constexprs=dict(BLOCK=64), num_warps=4,
                         target="sm_90", divisible_by_16=("X", "R", "Y")).asm["ptx"]
    ptxas_report(ptx)
    loops = ptx_loops(ptx)
    assert len(loops) == 1
    # the conversion (a barrier, the stores, a barrier, the loads) sits ahead of the loop, once
    assert "bar.sync" not in loops[0] and "st.shared" not in loops[0] and "ld.shared" not in loops[0]
    assert ptx.split(loops[0])[0].count("bar.sync") == 2


def test_row_vector_in_a_pipelined_loop_comes_through_cp_async():
    ptx = triton.compile(K.scaled_two_dot_kernel, signature=DOT_SIG, constexprs=DOT_CX, num_warps=4, num_stages=3,
                         target="sm_90", divisible_by_16=("A", "B", "C", "S", "Out")).asm["ptx"]
    rep = ptxas_report(ptx)
    assert rep["spills"] == 0, rep["text"]
    loops = _wgmma_loops(ptx)
    assert len(loops) == 1
    loop = loops[0]
    assert "ld.global" not in loop and "st.shared" not in loop and loop.count("bar.sync") == 2
    # S: 4-byte copies whose source size is 0 past n_rows (zero-filled, as `other`)
    assert re.search(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 4, %r\d+;", loop)


def _sum_inputs(g, device):
    x = torch.randn((3, 64, 64), generator=g, dtype=torch.float32).to(device)
    r = torch.randn(64, generator=g, dtype=torch.float32).to(device)
    return x, r, torch.full((64, 64), float("nan"), device=device)


def _dot_inputs(g, device, n_rows=200):
    a = (torch.randn((128, 64), generator=g) * 0.2).half().to(device)
    b = (torch.randn((256, 64), generator=g) * 0.2).half().to(device)
    c = (torch.randn((256, 64), generator=g) * 0.2).half().to(device)
    s = torch.randn(256, generator=g).to(device)
    b[n_rows:], c[n_rows:], s[n_rows:] = float("nan"), float("nan"), float("nan")  # masked off: never read
    return a, b, c, s, torch.full((128, 64), float("nan"), device=device), n_rows


def _dot_reference(a, b, c, s, n_rows):
    a, b, c, s = a.double(), b[:n_rows].double(), c[:n_rows].double(), s[:n_rows].double()
    p = ((a @ b.T) * s[None, :]).half().double()
    return p @ c


def _run_sum(x, r, y):
    K.row_scaled_sum_kernel[(1,)](x, r, y, x.shape[0], BLOCK=64, num_warps=4)
    torch.testing.assert_close(y.double(), (x.double() * r.double()[:, None]).sum(0), atol=1e-4, rtol=1e-5)


def _run_dot(a, b, c, s, out, n_rows):
    K.scaled_two_dot_kernel[(1,)](a, b, c, s, out, n_rows, num_warps=4, num_stages=3, **DOT_CX)
    torch.testing.assert_close(out.double(), _dot_reference(a, b, c, s, n_rows), atol=2e-2, rtol=1e-2)


def test_row_vector_kernels_interpret(interpret, gen):
    _run_sum(*_sum_inputs(gen, "cpu"))
    _run_dot(*_dot_inputs(gen, "cpu"))


@pytest.mark.gpu
def test_invariant_broadcast_gpu(gen):
    _run_sum(*_sum_inputs(gen, "cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("n_rows", [256, 200, 1])
def test_row_vector_in_a_pipelined_loop_gpu(gen, n_rows):
    _run_dot(*_dot_inputs(gen, "cuda", n_rows))
