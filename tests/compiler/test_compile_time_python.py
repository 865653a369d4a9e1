"""Python that kernels run at compile time (Triton's frontend tests): aggregates whose Python
`__init__` and methods call tl builtins through `_semantic`, static/class method factories,
constexpr arithmetic in constexpr functions, a user's `@tl.core.builtin`; and Triton's loop options
(`tl.condition(..., disable_licm=True)`, `tl.range(..., disable_licm=True)`). Interpret mode against
torch, the NVPTX backend through ptxas; GPU runs in test_compile_time_python_gpu.py."""
from __future__ import annotations

import re

import pytest
import torch

import compiler as triton
from compiler import ptxas
from compiler.frontend import generate_ir
from tests.compiler.kernels import compile_time_python as K
from tests.compiler.kernels.util import gen, interpret, poisoned, rand  # noqa: F401


def _for_reference(x, n, block):
    return (torch.arange(block, dtype=torch.int64) + x[:n].to(torch.int64).sum()).to(torch.int32)


def _while_reference(x, n, block):
    r = torch.arange(block, dtype=torch.int64)
    for i in range(n):
        r = r * 2 + int(x[i])
    return r.to(torch.int32)


@pytest.mark.parametrize("loop", ["for", "while"])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_aggregate_built_by_python_init_and_changed_in_a_loop(interpret, gen, loop, n):
    kernel, reference = {"for": (K.aggregate_for_kernel, _for_reference),
                         "while": (K.aggregate_while_kernel, _while_reference)}[loop]
    x = rand(gen, (8,), torch.int32, -50, 50)
    out = poisoned((16,), torch.int32)
    kernel[(1,)](x, out, n, BLOCK=16)
    assert torch.equal(out, reference(x, n, 16))


def test_static_and_class_method_factories(interpret, gen):
    x = rand(gen, (32,), torch.float32)
    out = poisoned((64,), torch.float32)
    K.aggregate_factories_kernel[(1,)](x, out, BLOCK=32)
    assert torch.equal(out[:32], x * 3) and torch.equal(out[32:], x * 2)


def test_constexpr_arithmetic_and_user_builtins(interpret):
    out = poisoned((8,), torch.int32)
    K.constexpr_values_kernel[(1,)](out)
    assert out.tolist() == [4, 16, 16, 8, 10, 11, 12, 13]


def test_a_builtin_called_from_python_outside_a_kernel_says_so():
    with pytest.raises(RuntimeError, match="tl.arange can only be called inside a @jit kernel"):
        K.Ramp(16)


@pytest.mark.parametrize("disable_licm", [False, True])
def test_loop_options_keep_the_loops_results(interpret, gen, disable_licm):
    x = rand(gen, (10,), torch.int32, -9, 9).to(torch.float32)
    out = poisoned((2,), torch.float32)
    K.loop_options_kernel[(1,)](x, out, 7, DISABLE_LICM=disable_licm)
    assert out.tolist() == [float((x[:7] + x[0] * 3).sum()), float((x[:7] * x[0]).sum())]


_LOOP_SIG = dict(X="*fp32", Out="*fp32", n="i32")


@pytest.mark.parametrize("disable_licm", [False, True])
def test_disable_licm_marks_both_loops_in_the_llvm_ir(disable_licm):
    ck = triton.compile(K.loop_options_kernel, signature=_LOOP_SIG, constexprs=dict(DISABLE_LICM=disable_licm),
                        target="sm_90")
    llir = ck.asm["llir"]
    licm = re.findall(r'^(!\d+) = !\{!"llvm\.licm\.disable"\}', llir, re.M)
    assert len(licm) == (1 if disable_licm else 0)
    if disable_licm:   # the loop IDs that carry it: distinct, self-referencing, one per loop
        ids = re.findall(rf'^(!\d+) = distinct !\{{(!\d+), {licm[0]}\}}', llir, re.M)
        assert len(ids) >= 2 and all(a == b for a, b in ids)
    assert "blocktune.loop.self" not in llir
    ptxas.report(ck.asm["ptx"])


def test_an_endless_while_compiles_as_triton_does():
    fn = generate_ir(K.endless_while_kernel, signature={"Out": "*i32"}, constexprs={})
    assert any(op.name == "while" for op in fn.body.ops)
    ck = triton.compile(K.endless_while_kernel, signature={"Out": "*i32"}, target="sm_90")
    ptxas.report(ck.asm["ptx"])


PTX_CASES = {
    "aggregate_for": (K.aggregate_for_kernel, dict(X="*i32", Out="*i32", n="i32"), dict(BLOCK=16)),
    "aggregate_while": (K.aggregate_while_kernel, dict(X="*i32", Out="*i32", n="i32"), dict(BLOCK=16)),
    "factories": (K.aggregate_factories_kernel, dict(X="*fp32", Out="*fp32"), dict(BLOCK=32)),
    "constexpr_values": (K.constexpr_values_kernel, dict(Out="*i32"), {}),
    "aggregate_tuple_loop": (K.aggregate_tuple_loop_kernel, dict(X="*i32", Out="*i32", n="i32"), dict(BLOCK=16)),
}


@pytest.mark.parametrize("name", sorted(PTX_CASES))
def test_ptx_assembles(name):
    kern, sig, cx = PTX_CASES[name]
    ck = triton.compile(kern, signature=sig, constexprs=cx, num_warps=4, target="sm_90")
    assert "0 bytes spill stores" in ptxas.report(ck.asm["ptx"])


@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_num_threads_and_num_warps_are_the_launchs(interpret, num_warps):
    out = poisoned((512,), torch.int32)
    K.launch_shape_kernel[(1,)](out, num_warps=num_warps)
    n = 32 * num_warps
    assert torch.equal(out[:n], torch.full((n,), num_warps, dtype=torch.int32))
    assert (out[n:] == poisoned((1,), torch.int32)).all()


@pytest.mark.parametrize("num_warps", [2, 8])
def test_num_threads_in_ptx(num_warps):
    ck = triton.compile(K.launch_shape_kernel, signature=dict(Out="*i32"), num_warps=num_warps, target="sm_90")
    assert f"end={32 * num_warps}" in ck.asm["ir"]
    ptxas.report(ck.asm["ptx"])


def test_num_warps_unknown_at_compile_time_is_an_error():
    with pytest.raises(triton.CompilationError, match=r"num_warps\(\) needs the launch's num_warps"):
        generate_ir(K.launch_shape_kernel, signature={"Out": "*i32"}, constexprs={})


def _rotate_add_reference(x, n):
    a, b = x.to(torch.int64), torch.zeros_like(x, dtype=torch.int64)
    for i in range(n):
        a, b = b + i, a
    return torch.cat([a, b]).to(torch.int32)


@pytest.mark.parametrize("n", [0, 1, 4])
def test_a_method_changes_a_tuple_field_in_a_loop(interpret, gen, n):
    x = rand(gen, (16,), torch.int32, -100, 100)
    out = poisoned((32,), torch.int32)
    K.aggregate_tuple_loop_kernel[(1,)](x, out, n, BLOCK=16)
    assert torch.equal(out, _rotate_add_reference(x, n))


def _if_reference(flag, where, block=8):
    r = torch.arange(block, dtype=torch.int32)
    if flag and where in ("then", "both"):
        r = r + 100
    if not flag and where in ("else", "both"):
        r = r * 3
    return r + torch.arange(block, dtype=torch.int32)


@pytest.mark.parametrize("where", ["then", "else", "both", "neither"])
@pytest.mark.parametrize("flag", [0, 1])
def test_an_aggregate_changed_in_a_runtime_if(interpret, where, flag):
    out = poisoned((8,), torch.int32)
    K.aggregate_if_kernel[(1,)](torch.tensor([flag], dtype=torch.int32), out, BLOCK=8, WHERE=where)
    assert torch.equal(out, _if_reference(flag, where))


@pytest.mark.parametrize("where", ["then", "neither"])
def test_an_aggregate_in_a_runtime_if_flows_out_only_when_changed(where):
    fn = generate_ir(K.aggregate_if_kernel, signature={"Flag": "*i32", "Out": "*i32"},
                     constexprs={"BLOCK": 8, "WHERE": where})
    (if_op,) = [op for op in fn.body.ops if op.name == "if"]
    assert len(if_op.results) == (1 if where == "then" else 0)
    ptxas.report(triton.compile(K.aggregate_if_kernel, signature={"Flag": "*i32", "Out": "*i32"},
                                constexprs={"BLOCK": 8, "WHERE": where}, target="sm_90").asm["ptx"])
