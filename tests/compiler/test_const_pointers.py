"""`tl.const` pointer parameters: read-only data as in Triton (signature "*k…"): loads work in
interpret mode and through the NVPTX backend; stores, atomics, and mixing with plain pointers in
a runtime if / call / conditional expression are compile errors with Triton's words.
GPU runs: test_const_pointers_gpu.py."""
from __future__ import annotations

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler import ptxas
from compiler.errors import CompilationError
from tests.compiler.kernels import const_pointers as K
from tests.compiler.kernels.util import gen, interpret, poisoned, rand  # noqa: F401


@pytest.mark.parametrize("n", [1, 100, 1000])
def test_loads_through_const_pointer(interpret, gen, n):
    x = rand(gen, (n,), torch.float32)
    out = poisoned((n,), torch.float32)
    K.scale_kernel[(triton.cdiv(n, 128),)](x, out, n, 2.5, BLOCK=128)
    torch.testing.assert_close(out, x * 2.5, rtol=0, atol=0)


def test_const_pointer_type_and_signature():
    ck = triton.compile(K.scale_kernel, signature=dict(X="*kfp32", Out="*fp32", n="i32", scale="fp32"),
                        constexprs=dict(BLOCK=128), target="sm_90")
    assert "0 bytes spill stores" in ptxas.report(ck.asm["ptx"])
    assert tl.pointer_type(tl.float32, const=True) != tl.pointer_type(tl.float32)
    assert str(tl.pointer_type(tl.float32, const=True)) == "*kfp32"
    assert tl.pointer_type(tl.float32, const=True).is_const() and not tl.pointer_type(tl.float32).is_const()


@pytest.mark.parametrize("kernel,args,message", [
    (K.store_through_const_kernel, 2, "Cannot store to a constant pointer"),
    (K.atomic_through_const_kernel, 1, "Cannot store to a constant pointer"),
    (K.runtime_if_mixes_kernel, 3, "Mismatched type for p between then block (*kfp32) and else block (*fp32)"),
    (K.runtime_call_mixes_kernel, 3, "Inconsistent return types"),
    (K.runtime_ternary_mixes_kernel, 3, "Ternary expression with dynamic condition has inconsistent type"),
])
def test_refusals(interpret, kernel, args, message):
    a = [torch.zeros(4), torch.zeros(4), 7][:args]   # 7: a runtime choice (1 would be specialized)
    with pytest.raises(CompilationError) as e:
        kernel[(1,)](*a)
    assert message in e.value.error_message
    assert f"{kernel.__name__}" not in message  # the message is Triton's, the location is the kernel's line
    assert "const_pointers.py:" in str(e.value)


@pytest.mark.parametrize("choose_x", [False, True])
def test_compile_time_choice(interpret, choose_x):
    x, out = torch.full((1,), 3.0), torch.full((1,), 5.0)
    if choose_x:
        K.constexpr_choice_kernel[(1,)](x, out, CHOOSE_X=True)
        assert out.item() == 4.0
    else:
        K.constexpr_choice_kernel[(1,)](x, out, CHOOSE_X=False)
        assert out.item() == 6.0
