"""cache_modifier, eviction_policy and volatile on tl.load/tl.store: the PTX qualifiers Triton emits
for each (compiled for sm_90 and assembled with ptxas), the errors for unsupported ones, and the
same kernels in interpret mode (where the hints change nothing)."""
from __future__ import annotations

import re

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler.errors import CompilationError
from tests.compiler.kernels.util import assert_close, gen, interpret, poisoned, rand  # noqa: F401


@triton.jit
def hinted_copy_kernel(X, Y, n, LOAD_CACHE: tl.constexpr, STORE_CACHE: tl.constexpr, EVICT: tl.constexpr,
                       VOLATILE: tl.constexpr, MASKED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        x = tl.load(X + offs, mask=offs < n, other=0.0, cache_modifier=LOAD_CACHE, eviction_policy=EVICT, volatile=VOLATILE)
        tl.store(Y + offs, x * 2, mask=offs < n, cache_modifier=STORE_CACHE, eviction_policy=EVICT)
    else:
        x = tl.load(X + offs, cache_modifier=LOAD_CACHE, eviction_policy=EVICT, volatile=VOLATILE)
        tl.store(Y + offs, x * 2, cache_modifier=STORE_CACHE, eviction_policy=EVICT)


def _ptx(masked=True, **hints):
    cx = dict(LOAD_CACHE="", STORE_CACHE="", EVICT="", VOLATILE=False, MASKED=masked, BLOCK=512)
    cx.update(hints)
    ck = triton.compile(hinted_copy_kernel, signature={"X": "*fp32", "Y": "*fp32", "n": "i32"}, constexprs=cx,
                        num_warps=4, target="sm_90", divisible_by_16=("X", "Y", "n"))
    from tests.compiler.test_ptx import ptxas_report
    ptxas_report(ck.asm["ptx"])
    return ck.asm["ptx"]


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("load_cache", [".ca", ".cg", ".cv"])
def test_load_cache_modifier(load_cache, masked):
    assert re.search(rf"ld\.global{re.escape(load_cache)}\.v4\.b32", _ptx(masked, LOAD_CACHE=load_cache))


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("store_cache", [".wb", ".cg", ".cs", ".wt"])
def test_store_cache_modifier(store_cache, masked):
    assert re.search(rf"st\.global{re.escape(store_cache)}\.v4\.b32", _ptx(masked, STORE_CACHE=store_cache))


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("evict", ["evict_first", "evict_last"])
def test_eviction_policy_is_an_l1_priority_and_an_l2_hint(evict, masked):
    ptx = _ptx(masked, EVICT=evict)
    assert f"createpolicy.fractional.L2::{evict}.b64" in ptx
    assert re.search(rf"ld\.global\.L1::{evict}\.L2::cache_hint\.v4\.b32 \{{[^}}]+\}}, \[[^]]+\], %rd\d+;", ptx)
    assert re.search(rf"st\.global\.L1::{evict}\.L2::cache_hint\.v4\.b32", ptx)


def test_volatile_load():
    ptx = _ptx(True, VOLATILE=True, EVICT="evict_first")
    assert re.search(r"ld\.volatile\.global\.v4\.b32", ptx)
    assert "ld.global" not in ptx.replace("ld.global.nc", "")  # every load of X is volatile


def test_plain_copy_has_no_hints():
    ptx = _ptx(False)
    assert "createpolicy" not in ptx and "L1::" not in ptx and ".cg" not in ptx


@pytest.mark.parametrize("hints,message", [
    (dict(LOAD_CACHE=".wb"), "cache modifier '.wb' is not supported here"),
    (dict(STORE_CACHE=".ca"), "cache modifier '.ca' is not supported here"),
    (dict(EVICT="evict_sometimes"), "eviction policy 'evict_sometimes' is not supported"),
])
def test_unsupported_hints_are_compile_errors(hints, message):
    with pytest.raises(CompilationError, match=re.escape(message)) as e:
        _ptx(True, **hints)
    assert "test_cache_hints.py:" in str(e.value)


@pytest.mark.parametrize("masked", [False, True])
def test_hints_change_nothing_in_interpret_mode(interpret, gen, masked):
    n = 1024 if not masked else 1000
    x = rand(gen, (n,), torch.float32)
    y = poisoned((n,), torch.float32)
    hinted_copy_kernel[(triton.cdiv(n, 512),)](x, y, n, LOAD_CACHE=".cg", STORE_CACHE=".cs", EVICT="evict_first",
                                               VOLATILE=True, MASKED=masked, BLOCK=512)
    assert_close(y, x * 2)
