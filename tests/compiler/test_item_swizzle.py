"""`x.item()` and a 1-element block as an `if` condition (Triton's unsplat), `tl.swizzle2d`, and the
allocator under Triton's module path: interpret mode, the PTX (assembled with ptxas) and the GPU."""
from __future__ import annotations

import pytest
import torch

import compiler as triton
import compiler.language as tl
from compiler.errors import CompilationError
from tests.compiler.kernels.util import interpret, poisoned  # noqa: F401


@triton.jit
def _clip_first(X, EXPLICIT: tl.constexpr):
    """X[0] = 42 when X[0] > 42, tested on a 1-element block (unsplat) or its .item()."""
    cond = tl.load(X + tl.arange(0, 1)) > 42
    if EXPLICIT:
        cond = cond.item()
    if cond:
        tl.store(X, 42)


@triton.jit
def _cas_with_items(Lock, Out, DT: tl.constexpr):
    zero = tl.full((1,), 0, dtype=DT).item()
    one = tl.full((1, 1), 1, dtype=DT).item()
    tl.store(Out, tl.atomic_cas(Lock, zero, one))


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("start,end", [(41, 41), (43, 42), (-5, -5), (1000, 42)])
def test_one_element_condition(interpret, explicit, start, end):
    x = torch.full((1,), start, dtype=torch.int32)
    _clip_first[(1,)](x, explicit)
    assert x.item() == end


@pytest.mark.parametrize("dtype,tl_dtype", [(torch.int32, tl.int32), (torch.int64, tl.int64), (torch.float32, tl.float32)])
def test_item_feeds_atomic_cas(interpret, dtype, tl_dtype):
    lock, old = torch.zeros(1, dtype=dtype), poisoned((1,), dtype)
    _cas_with_items[(1,)](lock, old, tl_dtype)
    assert lock.item() == 1 and old.item() == 0
    _cas_with_items[(1,)](lock, old, tl_dtype)  # the lock is taken now: nothing changes, the old value shows
    assert lock.item() == 1 and old.item() == 1


@triton.jit
def _item_of_many(X):
    tl.store(X, tl.load(X + tl.arange(0, 4)).item())


@triton.jit
def _if_on_many(X):
    if tl.load(X + tl.arange(0, 4)) > 0:
        tl.store(X, 1)


def test_item_and_if_need_one_element(interpret):
    x = torch.zeros(4)
    with pytest.raises(CompilationError, match=r"only a single-element block converts to a scalar \(\.item\(\)\), got a block of shape \[4\]"):
        _item_of_many[(1,)](x)
    with pytest.raises(CompilationError, match=r"`if` needs a scalar condition, got a block of shape \[4\]"):
        _if_on_many[(1,)](x)


@triton.jit
def _swizzle_all(Out, size_i, size_j, size_g):
    for i in range(0, size_i):
        for j in range(0, size_j):
            new_i, new_j = tl.swizzle2d(i, j, size_i, size_j, size_g)
            tl.store(Out + new_i * size_j + new_j, i * size_j + j)


@triton.jit
def _swizzle_block(Out, size_i, size_j, size_g, BI: tl.constexpr, BJ: tl.constexpr):
    i = tl.arange(0, BI)[:, None]
    j = tl.arange(0, BJ)[None, :]
    new_i, new_j = tl.swizzle2d(i, j, size_i, size_j, size_g)
    mask = (i < size_i) & (j < size_j)
    tl.store(Out + new_i * size_j + new_j, i * size_j + j, mask=mask)


def _swizzle_ref(size_i, size_j, size_g):
    """The position each row-major index moves to: groups of size_g rows walked column by column."""
    out = torch.empty(size_i, size_j, dtype=torch.int32)
    linear = 0
    for g0 in range(0, size_i, size_g):
        rows = min(size_g, size_i - g0)
        for j in range(size_j):
            for r in range(rows):
                out[g0 + r, j] = linear
                linear += 1
    return out


@pytest.mark.parametrize("size_i,size_j,size_g", [(5, 7, 3), (4, 4, 2), (8, 3, 8), (6, 5, 1)])
def test_swizzle2d(interpret, size_i, size_j, size_g):
    ref = _swizzle_ref(size_i, size_j, size_g)
    out = poisoned((size_i, size_j), torch.int32)
    _swizzle_all[(1,)](out, size_i, size_j, size_g)
    assert torch.equal(out, ref)
    out = poisoned((size_i, size_j), torch.int32)
    _swizzle_block[(1,)](out, size_i, size_j, size_g, BI=8, BJ=8)
    assert torch.equal(out, ref)


def test_tritons_allocation_module():
    """Triton's test fixture does `from triton.runtime._allocation import NullAllocator` and
    installs it after each test: blocktune's kernels never call an allocator, so both are accepted."""
    from compiler.runtime import _allocation
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))
    triton.set_allocator(_allocation.NullAllocator())
    assert isinstance(_allocation.get_allocator(), _allocation.NullAllocator)
    with pytest.raises(RuntimeError, match="no allocator was set"):
        _allocation.NullAllocator()(128, 128, None)
    triton.set_allocator(None)


def test_item_and_swizzle_ptx_assembles():
    from tests.compiler.test_ptx import ptxas_report
    for kernel, sig, cx in ((_clip_first, {"X": "*i32"}, {"EXPLICIT": False}), (_clip_first, {"X": "*i32"}, {"EXPLICIT": True}),
                            (_cas_with_items, {"Lock": "*i64", "Out": "*i64"}, {"DT": tl.int64}),
                            (_swizzle_block, {"Out": "*i32", "size_i": "i32", "size_j": "i32", "size_g": "i32"}, {"BI": 16, "BJ": 16})):
        ck = triton.compile(kernel, signature=sig, constexprs=cx, num_warps=4, target="sm_90")
        assert ptxas_report(ck.asm["ptx"])["spills"] == 0


@pytest.mark.gpu
def test_item_swizzle_gpu():
    for explicit in (False, True):
        for start, end in ((41, 41), (43, 42)):
            x = torch.full((1,), start, dtype=torch.int32, device="cuda")
            _clip_first[(1,)](x, explicit, num_warps=4)
            assert x.item() == end
    lock, old = torch.zeros(1, dtype=torch.int64, device="cuda"), poisoned((1,), torch.int64).cuda()
    _cas_with_items[(1,)](lock, old, tl.int64)
    assert lock.item() == 1 and old.item() == 0
    out = poisoned((13, 11), torch.int32).cuda()
    _swizzle_block[(1,)](out, 13, 11, 4, BI=16, BJ=16)
    assert torch.equal(out.cpu(), _swizzle_ref(13, 11, 4))
