"""`@jit(noinline=True)` functions: Triton compiles each as a function of its own, which takes scalar
arguments only; a block argument is a compile error on the GPU, while its interpreter runs the call.
blocktune compiles such a call on the GPU as a call of a device function of its own (a `.func`,
specialized on the arguments' types and compile-time values), runs it inlined in interpret mode, and
refuses a block argument on the GPU with Triton's words. A noinline function that returns a block
is inlined (the same results, its lines in the caller)."""
from __future__ import annotations

import collections
import re
import subprocess

import numpy as np
import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler import knobs, ptxas
from compiler.errors import SourceNode
from tests.compiler.kernels import device_calls as K
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
    assert "st.global" in _funcs(ck.asm["ptx"])["_store_scalar"]


def _funcs(ptx: str) -> dict:
    """The PTX's device functions' bodies, by the noinline function's name."""
    out = {}
    for m in re.finditer(r"^\.func\s+(?:\([^)]*\)\s*)?(\w+?)__\w+\(\n(.*?)^\}", ptx, re.M | re.S):
        out[m.group(1)] = m.group(2)
    return out


COPY_SIG = {"X": "*fp32", "Y": "*fp32", "n": "i32", "scale": "fp16", "flip": "i1"}


def test_a_noinline_call_is_a_call_of_a_device_function():
    """Triton's shape: the kernel `call`s a `.func` per specialization of the callee (the two
    BLOCK values: two functions; the same one called twice: one), and the kernel's own PTX has
    none of the callee's loads."""
    ck = triton.compile(K.copy_twice_kernel, signature=COPY_SIG, constexprs={"BLOCK": 128}, target="sm_90")
    ptx = ck.asm["ptx"]
    kernel = ptx[ptx.index(".visible .entry"):]
    kernel = kernel[:kernel.index("\n}")]
    assert kernel.count("call.uni") == 3 and "ld.global" not in kernel
    assert len(re.findall(r"^\.func \w+\(", ptx, re.M)) == 2
    assert "ld.global" in _funcs(ptx)["scaled_copy"]
    assert ck.asm["ir"].count("call(") == 3 and ck.asm["ir"].count("func @scaled_copy__") == 2
    ptxas.report(ptx)


def test_the_sass_has_the_call_line_and_the_callee_lines(tmp_path):
    """Triton's test_line_info[call_noinline]: the call's line (in the kernel) and the callee's
    load line (in its function) are both in the cubin's line table."""
    ck = triton.compile(K.copy_twice_kernel, signature=COPY_SIG, constexprs={"BLOCK": 128}, target="sm_90")
    (tmp_path / "k.cubin").write_bytes(ck.asm["cubin"])
    sass = subprocess.run([knobs.nvidia.nvdisasm.path, "-g", str(tmp_path / "k.cubin")], check=True,
                          capture_output=True, text=True).stdout
    lines = collections.Counter(re.findall(r'## File "([^"]+)", line (\d+)', sass))
    for tag in ("first call", "callee load"):
        assert (K.__file__, str(K.line_of(tag))) in lines, (tag, sorted(lines))


def test_a_device_function_with_a_reduction_assembles():
    ck = triton.compile(K.row_sums_kernel, signature={"X": "*fp32", "Out": "*fp32", "n_rows": "i32"},
                        constexprs={"R": 32, "C": 128}, target="sm_90")
    assert "bar.sync" in _funcs(ck.asm["ptx"])["row_sum_into"]
    assert not re.search(r"[1-9]\d* bytes spill stores", ptxas.report(ck.asm["ptx"]))


def test_a_device_function_returns_scalars():
    """One value (its `.func` returns it), or several (a struct: here fp16, fp16 and a bool)."""
    ck = triton.compile(K.returned_value_kernel, signature={"X": "*fp32", "v": "fp32"}, constexprs={}, target="sm_90")
    assert re.search(r"^\.func\s+\(\.param \.b32 func_retval0\) plus_one__", ck.asm["ptx"], re.M)
    ptxas.report(ck.asm["ptx"])
    ck = triton.compile(K.ordered_pair_kernel, signature={"X": "*fp16", "Out": "*fp16"}, constexprs={}, target="sm_90")
    assert "call.uni" in ck.asm["ptx"] and "ordered" in _funcs(ck.asm["ptx"])
    ptxas.report(ck.asm["ptx"])


def test_a_noinline_function_that_returns_a_block_is_inlined():
    ck = triton.compile(K.returned_block_kernel, signature={"X": "*fp32", "v": "fp32"}, constexprs={"N": 64},
                        target="sm_90")
    assert ".func" not in ck.asm["ptx"] and "call(" not in ck.asm["ir"]


@pytest.mark.parametrize("pair", [(1.5, -2.0), (-2.0, 1.5)])
def test_returned_values_interpreted(interpret, pair):
    x = torch.tensor(pair, dtype=torch.float16)
    out = torch.full((3,), float("nan"), dtype=torch.float16)
    K.ordered_pair_kernel[(1,)](x, out)
    assert out.tolist() == [-2.0, 1.5, 1.0 if pair[0] < pair[1] else 0.0]


@pytest.mark.gpu
@pytest.mark.parametrize("pair", [(1.5, -2.0), (-2.0, 1.5)])
def test_returned_values_gpu(pair):
    x = torch.tensor(pair, dtype=torch.float16, device="cuda")
    out = torch.full((3,), float("nan"), dtype=torch.float16, device="cuda")
    K.ordered_pair_kernel[(1,)](x, out)
    y = torch.full((1,), float("nan"), device="cuda")
    K.returned_value_kernel[(1,)](y, 2.5)
    torch.cuda.synchronize()
    assert out.tolist() == [-2.0, 1.5, 1.0 if pair[0] < pair[1] else 0.0] and y.item() == 3.5


def _copy_twice_reference(x, n, scale, flip):
    y = torch.full_like(x, float("nan"))
    s = float(torch.tensor(scale, dtype=torch.float32))   # a Python float is an fp32 argument
    y[:n] = x[:n] * (-s if flip else s)
    y[128:128 + n] = x[128:128 + n] * 2
    return y


@pytest.mark.parametrize("flip", [False, True])
def test_interpret_mode_runs_the_calls_inlined(interpret, flip):
    x = torch.randn(256)
    y = torch.full_like(x, float("nan"))
    K.copy_twice_kernel[(1,)](x, y, 100, 0.7, flip, BLOCK=128)
    torch.testing.assert_close(y, _copy_twice_reference(x, 100, 0.7, flip), equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("n", [1, 100, 128])
def test_device_function_calls_gpu(flip, n):
    x = torch.randn(256)
    y = torch.full((256,), float("nan"), device="cuda")
    K.copy_twice_kernel[(1,)](x.cuda(), y, n, 0.7, flip, BLOCK=128)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.cpu(), _copy_twice_reference(x, n, 0.7, flip), equal_nan=True)


@pytest.mark.gpu
def test_a_device_function_with_a_reduction_gpu():
    """The callee's shared memory (a reduction across warps) next to the kernel's own."""
    x = torch.randn(32, 128)
    out = torch.full((32 + 1,), float("nan"), device="cuda")
    K.row_sums_kernel[(1,)](x.cuda(), out, 32, R=32, C=128)
    torch.cuda.synchronize()
    torch.testing.assert_close(out[:32].cpu().double(), x.double().sum(1), atol=1e-3, rtol=1e-4)
    assert out[32].item() == pytest.approx(x.double().sum().item(), abs=1e-2, rel=1e-4)


def test_interpret_mode_runs_a_call_with_a_block_argument(interpret):
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    out = x.copy()
    block_argument_kernel[(1,)](out, BLOCK=64)
    np.testing.assert_allclose(out, x.astype(np.float64) * 3.0, rtol=1e-6)
