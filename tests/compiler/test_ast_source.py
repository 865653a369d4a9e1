"""Triton's ahead-of-time API: `triton.compile(ASTSource(fn, signature, constexprs, attrs),
target=GPUTarget(...), options={...})`, for any NVIDIA target without a GPU; the compiled kernel's
`asm` has the stages blocktune has (its cubin assembled when asked for) and says so of the others."""
from __future__ import annotations

import pickle

import pytest

import compiler as triton
import compiler.language as tl
from compiler import ptxas
from compiler.backends.compiler import GPUTarget
from compiler.runtime.kernel import KernelAsm


@triton.jit
def _add(a, b, c):
    idx = tl.arange(0, 32)
    tl.store(c + idx, tl.load(a + idx) + tl.load(b + idx))


@triton.jit
def _shifted_copy(a, o, N: tl.constexpr):
    tl.store(o + N, tl.load(a + N))


ADD_SIG = {"a": "*fp32", "b": "*fp32", "c": "*fp32"}


@pytest.mark.parametrize("arch,line", [(80, ".target sm_80"), (90, ".target sm_90a"), (100, ".target sm_100a"),
                                       (120, ".target sm_120a")])
def test_compiles_for_the_target_asked_for(arch, line):
    """Triton's names: capability 9.0 and up get the `a` architecture; sm_100 and sm_120 need a
    newer PTX ISA than the sm_90 kernels' 8.4."""
    k = triton.compile(triton.ASTSource(fn=_add, signature=ADD_SIG, constexprs={}), target=GPUTarget("cuda", arch, 32))
    ptx = k.asm["ptx"]
    assert line in ptx.splitlines() and ".address_size 64" in ptx
    assert (".version 8.4" in ptx) == (arch <= 90)


@pytest.mark.skipif(ptxas.find() is None, reason="no ptxas here (CI installs the nvidia-cuda-nvcc wheel)")
def test_the_cubin_is_assembled_when_asked_for():
    k = triton.compile(triton.ASTSource(fn=_add, signature=ADD_SIG, constexprs={}), target=GPUTarget("cuda", 90, 32))
    k.asm.pop("cubin", None)       # the compiled kernel may come from the memory cache
    assert "cubin" not in k.asm and k.asm.get("cubin") is None
    cubin = k.asm["cubin"]
    assert cubin[:4] == b"\x7fELF" and k.asm.get("cubin") is cubin


def test_stages_blocktune_does_not_have_say_so():
    k = triton.compile(triton.ASTSource(fn=_add, signature=ADD_SIG, constexprs={}), target=GPUTarget("cuda", 90, 32))
    with pytest.raises(KeyError, match="blocktune has no ttgir stage .*without Triton's MLIR.*stages: cubin, ir, llir, ptx"):
        k.asm["ttgir"]
    with pytest.raises(KeyError, match="'nope': no such stage"):
        k.asm["nope"]
    again = pickle.loads(pickle.dumps(k))
    assert isinstance(again.asm, KernelAsm) and again.asm["ptx"] == k.asm["ptx"]


def test_signature_order_and_constexprs_by_name_or_index_path():
    """The parameters' order is the kernel's, not the signature dict's; Triton's "constexpr" entries
    take their value from constexprs, keyed by name or by index path; attrs' divisibility becomes
    blocktune's divisible_by_16."""
    by_name = triton.compile(triton.ASTSource(fn=_shifted_copy, constexprs={"N": 32},
                                              signature={"N": "constexpr", "o": "*fp32", "a": "*fp32"}),
                             target=GPUTarget("cuda", 90, 32))
    assert by_name.metadata["arg_names"] == ["a", "o"] and by_name.metadata["constexprs"] == {"N": 32}
    by_path = triton.compile(triton.ASTSource(fn=_shifted_copy, signature={"a": "*fp32", "o": "*fp32"},
                                              constexprs={(2,): 32}, attrs={(0,): [["tt.divisibility", 16]]}),
                             target="sm_90", options={"num_warps": 2})
    assert by_path.metadata["divisible_by_16"] == ["a"] and by_path.metadata["num_warps"] == 2
    assert triton.compile(triton.ASTSource(fn=_add, signature=ADD_SIG), options={"arch": "sm80"}).metadata["target"] == "sm_80"


def test_wrong_uses_are_errors():
    src = triton.ASTSource(fn=_add, signature=ADD_SIG, constexprs={})
    with pytest.raises(ValueError, match="no option.*'num_threads'"):
        triton.compile(src, target="sm_90", options={"num_threads": 4})
    with pytest.raises(ValueError, match="num_ctas must be a power of two"):
        triton.compile(src, target="sm_90", options={"num_ctas": 3})
    with pytest.raises(ValueError, match=r"num_ctas > 1 requires NVIDIA SM90\+"):
        triton.compile(src, options={"num_ctas": 2, "arch": "sm80"})
    with pytest.raises(ValueError, match="NVIDIA GPUs"):
        triton.compile(src, target=GPUTarget("hip", "gfx942", 64))
    for error in (ValueError, AssertionError):    # Triton asserts it
        with pytest.raises(error, match="num_warps must be a power of 2"):
            triton.compile(src, target="sm_90", options={"num_warps": 3})
    with pytest.raises(TypeError, match="Signature keys must be string"):
        triton.ASTSource(fn=_add, signature={0: "*fp32"})
