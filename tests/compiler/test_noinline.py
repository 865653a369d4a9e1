"""`@jit(noinline=True)` functions: Triton compiles each as a function of its own, which takes scalar
arguments only; a block argument is a compile error on the GPU, while its interpreter runs the call.
blocktune inlines the call, runs it in interpret mode, and refuses it on the GPU with Triton's words."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as triton
import compiler.language as tl
from compiler.errors import SourceNode
from tests.compiler.kernels.modes import interpret  # noqa: F401


@triton.jit(noinline=True)
def _scaled(val, factor):
    return val * factor


@triton.jit(noinline=True)
def _store_scalar(ptr, value):
    tl.store(ptr, value)


@triton.jit
def block_argument_kernel(ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(ptr + offs, _scaled(tl.load(ptr + offs), 3.0))


@triton.jit
def scalar_argument_kernel(ptr, value):
    _store_scalar(ptr, value)


def test_gpu_compile_refuses_a_block_argument_with_tritons_words():
    with pytest.raises(triton.CompilationError) as info:
        triton.compile(block_argument_kernel, {"ptr": "*fp32"}, {"BLOCK": 64}, target="sm_90")
    err = info.value
    assert err.message == "Function _scaled is marked noinline, but was called with non-scalar argument val:<64xfp32>"
    assert err.node == SourceNode(3, 25) and "at 3:25:" in str(err)     # the call


def test_gpu_compile_takes_scalar_arguments():
    ck = triton.compile(scalar_argument_kernel, {"ptr": "*fp32", "value": "fp32"}, {}, target="sm_90")
    assert "st.global" in ck.asm["ptx"]


def test_interpret_mode_runs_a_call_with_a_block_argument(interpret):
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    out = x.copy()
    block_argument_kernel[(1,)](out, BLOCK=64)
    np.testing.assert_allclose(out, x.astype(np.float64) * 3.0, rtol=1e-6)
