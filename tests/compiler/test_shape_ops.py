"""Shape ops, scans, custom reductions, sorts, histograms and gathers: interpret mode against
numpy/torch, and every kernel through the NVPTX backend and ptxas (GPU runs: test_shape_ops_gpu.py)."""
from __future__ import annotations

import pytest
import torch

import compiler as triton
from compiler.backend import nvptx
from tests.compiler.kernels import shape_ops as K
from tests.compiler.kernels.util import assert_close, gen, interpret, poisoned, rand  # noqa: F401

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


# ---- join / split / interleave -------------------------------------------------------------------

@pytest.mark.parametrize("M,N", [(1, 4), (4, 8), (16, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.int64])
def test_join_split_interleave(interpret, gen, M, N, dtype):
    x, y = rand(gen, (M, N), dtype, -100, 100), rand(gen, (M, N), dtype, -100, 100)
    joined, a, b = poisoned((M, N, 2), dtype), poisoned((M, N), dtype), poisoned((M, N), dtype)
    inter = poisoned((M, 2 * N), dtype)
    K.join_split_kernel[(1,)](x, y, joined, a, b, inter, M=M, N=N)
    assert torch.equal(joined, torch.stack([x, y], -1))
    assert torch.equal(a, x) and torch.equal(b, y)
    assert torch.equal(inter, torch.stack([x, y], -1).reshape(M, 2 * N))


@pytest.mark.parametrize("N", [2, 64])
def test_split_of_loaded_pairs(interpret, gen, N):
    x = rand(gen, (N, 2), torch.float32)
    a, b = poisoned((N + 1,), torch.float32), poisoned((N + 1,), torch.float32)
    K.split_loaded_kernel[(1,)](x, a, b, N=N)
    assert torch.equal(a[:N], x[:, 0]) and torch.equal(b[:N], x[:, 1])
    assert a[N] == x[0, 1] and b[N] == x[0, 0]


def test_join_needs_one_type():
    src = '''
import compiler as triton
import compiler.language as tl
@triton.jit
def k(X):
    x = tl.load(X + tl.arange(0, 4))
    tl.store(X + tl.arange(0, 4), tl.sum(tl.join(x, x.to(tl.int32)), 1))
'''
    ns = _exec(src)
    with pytest.raises(triton.CompilationError, match=r"tl.join needs two values of one type.*\n.*tl.join"):
        triton.compile(ns["k"], signature={"X": "*fp32"}, target="sm_90")


# ---- PTX: every kernel compiles and assembles ------------------------------------------------------

PTX_CASES = {
    "join_split_fp32": (K.join_split_kernel, dict(X="*fp32", Y="*fp32", Joined="*fp32", A="*fp32", B="*fp32", Inter="*fp32"),
                        dict(M=16, N=32), 4),
    "join_split_i8": (K.join_split_kernel, dict(X="*i8", Y="*i8", Joined="*i8", A="*i8", B="*i8", Inter="*i8"),
                      dict(M=4, N=8), 1),
    "split_loaded": (K.split_loaded_kernel, dict(X="*fp16", A="*fp16", B="*fp16"), dict(N=256), 4),
}


@pytest.mark.parametrize("name", sorted(PTX_CASES))
def test_ptx_assembles(name):
    kern, sig, cx, nw = PTX_CASES[name]
    ck = triton.compile(kern, signature=sig, constexprs=cx, num_warps=nw, target="sm_90")
    rep = nvptx.ptxas_check(ck.asm["ptx"])
    assert "0 bytes spill stores" in rep, rep


def _exec(src):
    import linecache
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src)
    linecache.checkcache(f.name)
    ns = {"__file__": f.name}
    exec(compile(src, f.name, "exec"), ns)
    return ns
