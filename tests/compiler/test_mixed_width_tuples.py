"""Reductions and scans over tuples of mixed element widths (argmin over int8 carries int32
indices): their component arrays in shared memory must each be aligned to its element, or the
kernel dies at run time with a misaligned address (Triton's test_reduce1d[argmin-int8-64] did)."""
from __future__ import annotations

import re
import secrets

import pytest

import compiler as triton
import compiler.language as tl
from compiler.backend.reduction import component_bases


@triton.jit
def argmin_kernel(X, Z, BLOCK: tl.constexpr):
    x = tl.load(X + tl.arange(0, BLOCK))
    tl.store(Z, tl.argmin(x, axis=0, tie_break_left=True))


@triton.jit
def _keep_min(a, ia, b, ib):
    return tl.where(b < a, b, a), tl.where(b < a, ib, ia)


@triton.jit
def running_argmin_kernel(X, V, I, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    v, i = tl.associative_scan((x, offs), 0, _keep_min)
    tl.store(V + offs, v)
    tl.store(I + offs, i)


def test_component_arrays_start_aligned():
    assert component_bases([2, 8, 3, 4]) == ([0, 16, 32, 48], 52)
    assert component_bases([64, 256]) == ([0, 64], 320)


def _shared_accesses(ptx: str):
    """(access bytes, immediate offset) of every ld/st.shared whose address has a constant offset."""
    for m in re.finditer(r"(?:ld|st)\.shared(\.v(\d))?\.[bsuf](\d+)\s+[^\[]*\[[^\]+]*\+(\d+)\]", ptx):
        width = int(m.group(3)) // 8 * int(m.group(2) or 1)
        yield width, int(m.group(4))


@pytest.mark.parametrize("dtype", ["*i8", "*i16", "*fp16"])
@pytest.mark.parametrize("block,warps", [(64, 4), (512, 8)])
def test_argmin_shared_accesses_are_aligned(dtype, block, warps):
    ck = triton.compile(argmin_kernel.fn, signature=dict(X=dtype, Z="*i32"), constexprs=dict(BLOCK=block),
                        target="sm_90", divisible_by_16=("X", "Z"), num_warps=warps)
    accesses = list(_shared_accesses(ck.asm["ptx"]))
    assert accesses, "the cross-warp reduction no longer goes through shared memory at constant offsets"
    assert all(off % width == 0 for width, off in accesses), accesses


def test_mixed_width_scan_shared_accesses_are_aligned():
    ck = triton.compile(running_argmin_kernel.fn, signature=dict(X="*i8", V="*i8", I="*i32"),
                        constexprs=dict(BLOCK=256), target="sm_90", divisible_by_16=("X", "V", "I"), num_warps=4)
    assert all(off % width == 0 for width, off in _shared_accesses(ck.asm["ptx"]))


@pytest.mark.gpu
@pytest.mark.parametrize("block,warps", [(64, 4), (128, 4), (512, 8)])
def test_argmin_and_running_argmin_of_int8_gpu(block, warps):
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda")
    seed = secrets.randbits(31)
    g.manual_seed(seed)
    print(f"seed={seed}")
    x = torch.randint(-10, 10, (block,), generator=g, device="cuda", dtype=torch.int8)
    z = torch.full((1,), -123456, device="cuda", dtype=torch.int32)
    argmin_kernel[(1,)](x, z, BLOCK=block, num_warps=warps)
    xs = x.long().cpu()
    assert z.item() == int((xs == xs.min()).nonzero()[0])   # the first of the minima
    v = torch.full((block,), 127, device="cuda", dtype=torch.int8)
    i = torch.full((block,), -123456, device="cuda", dtype=torch.int32)
    running_argmin_kernel[(1,)](x, v, i, BLOCK=block, num_warps=warps)
    ref = torch.cummin(xs, 0)
    assert torch.equal(v.long().cpu(), ref.values)
    assert torch.equal(xs[i.long().cpu()], ref.values)
