"""GPU runs of the NVPTX backend against torch (run by the lead on an H100: `pytest -m gpu`).

Every test: fresh random inputs (a new seed each run, printed on failure), outputs poisoned with
NaN (or a sentinel for integers) before the launch, comparison in float64.
"""
from __future__ import annotations

import math
import secrets

import pytest

torch = pytest.importorskip("torch")

import test_ptx as K  # noqa: E402  (the kernels)
# Bound at collection: tests/tuner has a module of the same name that replaces it in sys.modules.
from tests.compiler.kernels import language as L  # noqa: E402

pytestmark = pytest.mark.gpu

DEV = "cuda"
TD = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "i32": torch.int32}


@pytest.fixture
def gen():
    seed = secrets.randbits(31)
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    print(f"seed={seed}")
    return g


def randn(shape, dtype, gen, scale=1.0):
    return (torch.randn(shape, generator=gen, device=DEV, dtype=torch.float32) * scale).to(dtype)


def poisoned(shape, dtype):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), device=DEV, dtype=dtype)
    return torch.full(shape, -123456 if dtype != torch.bool else 0, device=DEV, dtype=dtype)


def close(out, ref, atol, rtol):
    o, r = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(o).any() or torch.isnan(r).any(), "NaN left in the output (poison not overwritten?)"
    torch.testing.assert_close(o, r, atol=atol, rtol=rtol, equal_nan=True)


# ---- elementwise --------------------------------------------------------------------------------

@pytest.mark.parametrize("dt,n,block,nw", [("fp32", 98432, 1024, 4), ("fp32", 1 << 20, 4096, 8), ("fp16", 12345, 1024, 4),
                                           ("fp32", 77, 128, 1), ("fp32", 1000, 64, 4)])
def test_vector_add(gen, dt, n, block, nw):
    x, y = randn(n, TD[dt], gen), randn(n, TD[dt], gen)
    out = poisoned(n, TD[dt])
    K.add_kernel[(math.ceil(n / block),)](x, y, out, n, BLOCK=block, num_warps=nw)
    close(out, x.double() + y.double(), atol=1e-3 if dt == "fp16" else 1e-6, rtol=1e-3 if dt == "fp16" else 1e-6)


@pytest.mark.parametrize("src,dst", [("fp32", "bf16"), ("fp32", "fp16"), ("fp16", "i32"), ("fp32", "i32")])
def test_casts(gen, src, dst):
    n = 5000
    x = randn(n, TD[src], gen, scale=100.0)
    y = poisoned(n, TD[dst])
    K.cast_kernel[(math.ceil(n / 1024),)](x, y, n, BLOCK=1024)
    ref = x.to(TD[dst])  # torch: round-to-nearest-even for floats, truncation toward zero for ints
    assert torch.equal(y.cpu(), ref.cpu())


def test_cast_bool(gen):
    n = 3000
    x = torch.rand(n, generator=gen, device=DEV) > 0.5
    y = poisoned(n, torch.float32)
    K.cast_kernel[(3,)](x, y, n, BLOCK=1024)
    assert torch.equal(y.cpu(), x.float().cpu())


@pytest.mark.parametrize("op,ref,tol", [
    ("exp", torch.exp, 2e-6), ("log", torch.log, 2e-6), ("sqrt", torch.sqrt, 2e-6), ("rsqrt", torch.rsqrt, 2e-6),
    ("sin", torch.sin, 2e-6), ("cos", torch.cos, 2e-6), ("erf", torch.erf, 2e-6), ("sigmoid", torch.sigmoid, 2e-6),
    ("exp2", torch.exp2, 2e-6), ("floor", torch.floor, 0.0), ("div", lambda x: x / (x + 3.0), 2e-6)])
def test_math(gen, op, ref, tol):
    n = 10000
    x = torch.rand(n, generator=gen, device=DEV) * 4 + 0.05  # positive: log/sqrt defined
    if op in ("sin", "cos", "erf", "sigmoid", "exp", "floor", "exp2"):
        x = x - 2.0
    y = poisoned(n, torch.float32)
    K.math_kernel[(math.ceil(n / 1024),)](x, y, n, OP=op, BLOCK=1024)
    close(y, ref(x.double()), atol=tol, rtol=tol * 4)


# ---- softmax / layer norm ----------------------------------------------------------------------

@pytest.mark.parametrize("dt,rows,cols,block,nw", [("fp32", 64, 1000, 1024, 4), ("fp32", 17, 4096, 4096, 8),
                                                   ("fp16", 33, 3000, 4096, 8), ("fp32", 8, 100, 128, 1),
                                                   ("fp32", 4, 33, 64, 4)])
def test_softmax(gen, dt, rows, cols, block, nw):
    x = randn((rows, cols), TD[dt], gen, scale=3.0)
    out = poisoned((rows, cols), TD[dt])
    K.softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=block, num_warps=nw)
    tol = 2e-3 if dt == "fp16" else 1e-5
    close(out, torch.softmax(x.double(), dim=1), atol=tol, rtol=tol)


@pytest.mark.parametrize("M,N,dt,block", [(64, 1000, "fp16", 1024), (16, 5000, "fp32", 1024), (8, 512, "fp32", 512)])
def test_layer_norm(gen, M, N, dt, block):
    x = randn((M, N), TD[dt], gen)
    w, b = randn(N, TD[dt], gen), randn(N, TD[dt], gen)
    y = poisoned((M, N), TD[dt])
    mean, rstd = poisoned(M, torch.float32), poisoned(M, torch.float32)
    K.layer_norm_fwd[(M,)](x, y, w, b, mean, rstd, x.stride(0), N, 1e-5, BLOCK_SIZE=block, num_warps=8)
    ref = torch.nn.functional.layer_norm(x.double(), (N,), w.double(), b.double(), 1e-5)
    tol = 1e-2 if dt == "fp16" else 1e-4
    close(y, ref, atol=tol, rtol=tol)
    close(mean, x.double().mean(1), atol=1e-4, rtol=1e-4)
    close(rstd, 1 / torch.sqrt(x.double().var(1, unbiased=False) + 1e-5), atol=1e-3, rtol=1e-3)


# ---- reductions / scans ------------------------------------------------------------------------

@pytest.mark.parametrize("M,N,nw", [(100, 50, 4), (64, 64, 8), (7, 33, 1)])
def test_reduce2d(gen, M, N, nw):
    BM, BN = 32, 64
    x = randn((M, N), torch.float32, gen)
    grid = math.ceil(M / BM)
    rows, cols = poisoned(M, torch.float32), poisoned(grid * BN, torch.float32)
    cen = poisoned((M, N), torch.float32)
    K.reduce2d_kernel[(grid,)](x, rows, cols, cen, M, N, x.stride(0), BM=BM, BN=BN, num_warps=nw)
    xd = x.double()
    close(rows, xd.sum(1), atol=1e-4, rtol=1e-5)
    close(cen, xd - (xd.sum(1) / N)[:, None], atol=1e-4, rtol=1e-5)
    for p in range(grid):
        blk = xd[p * BM:(p + 1) * BM]
        close(cols[p * BN:p * BN + N], blk.max(0).values, atol=0, rtol=0)


@pytest.mark.parametrize("N,BN,nw", [(500, 512, 4), (64, 64, 1), (3000, 4096, 8)])
def test_argmax(gen, N, BN, nw):
    rows = 37
    x = randn((rows, N), torch.float32, gen)
    x[3, 10] = x[3, 20] = x[3].max() + 1  # a tie: first index wins
    out = poisoned(rows, torch.int32)
    K.argmax_kernel[(rows,)](x, out, N, x.stride(0), BN=BN, num_warps=nw)
    assert torch.equal(out.long().cpu(), torch.argmax(x, dim=1).cpu())
    assert out[3].item() == 10


@pytest.mark.parametrize("dt,N,block,nw", [("fp32", 1000, 1024, 4), ("i32", 200, 256, 2), ("fp32", 4096, 4096, 8), ("fp32", 20, 32, 4)])
def test_cumsum(gen, dt, N, block, nw):
    if dt == "i32":
        x = torch.randint(-100, 100, (N,), generator=gen, device=DEV, dtype=torch.int32)
    else:
        x = randn(N, torch.float32, gen)
    y = poisoned(N, x.dtype)
    K.cumsum_kernel[(1,)](x, y, N, BLOCK=block, num_warps=nw)
    if dt == "i32":
        assert torch.equal(y.cpu(), torch.cumsum(x, 0).to(torch.int32).cpu())
    else:
        close(y, torch.cumsum(x.double(), 0), atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("BM,BN,axis,nw", [(64, 32, 0, 4), (16, 128, 1, 4), (32, 32, 0, 8), (8, 256, 1, 2)])
def test_cumsum2d(gen, BM, BN, axis, nw):
    x = randn((BM, BN), torch.float32, gen)
    y = poisoned((BM, BN), torch.float32)
    K.cumsum2d_kernel[(1,)](x, y, BM=BM, BN=BN, AXIS=axis, num_warps=nw)
    close(y, torch.cumsum(x.double(), axis), atol=1e-4, rtol=1e-4)


# ---- atomics -----------------------------------------------------------------------------------

@pytest.mark.parametrize("block,nw", [(256, 4), (32, 4), (1024, 8)])
def test_atomic_add(gen, block, nw):
    n, bins = 10000, 16
    x = torch.randint(-8, 8, (n,), generator=gen, device=DEV).float()  # exact in fp32 in any order
    out = torch.zeros(bins, device=DEV)
    old = poisoned(n, torch.float32)
    K.atomic_add_kernel[(math.ceil(n / block),)](x, out, old, n, BINS=bins, BLOCK=block, num_warps=nw)
    ref = torch.zeros(bins, dtype=torch.float64).index_add_(0, torch.arange(n) % bins, x.double().cpu())
    close(out, ref, atol=0, rtol=0)  # replicated layouts must not add twice
    assert not torch.isnan(old).any()
    # old values: whatever order the adds ran in, {0} ∪ {old + x} == {old} ∪ {final} per bin
    for bidx in range(bins):
        sel = ((torch.arange(n) % bins) == bidx)
        o, xv = old.cpu()[sel].double(), x.cpu()[sel].double()
        lhs = sorted([0.0] + (o + xv).tolist())
        rhs = sorted(o.tolist() + [ref[bidx].item()])
        assert lhs == rhs


@pytest.mark.parametrize("dt", ["fp32", "i32"])
def test_atomic_minmax(gen, dt):
    n = 5000
    if dt == "fp32":
        x = randn(n, torch.float32, gen)
        init_mx, init_mn = -float("inf"), float("inf")
    else:
        x = torch.randint(-1000, 1000, (n,), generator=gen, device=DEV, dtype=torch.int32)
        init_mx, init_mn = -(2 ** 31), 2 ** 31 - 1
    mx = torch.full((4,), init_mx, device=DEV, dtype=x.dtype)
    mn = torch.full((4,), init_mn, device=DEV, dtype=x.dtype)
    K.atomic_minmax_kernel[(math.ceil(n / 128),)](x, mx, mn, n, BLOCK=128)
    xs = x.cpu().view(-1)
    idx = torch.arange(n) % 4
    for i in range(4):
        assert mx[i].item() == xs[idx == i].max().item()
        assert mn[i].item() == xs[idx == i].min().item()


def test_sum_atomic(gen):
    n = 100000
    x = randn(n, torch.float32, gen)
    out = torch.zeros(1, device=DEV)
    K.sum_atomic_kernel[(math.ceil(n / 1024),)](x, out, n, BLOCK=1024)
    close(out, x.double().sum().reshape(1), atol=1e-2, rtol=1e-4)


def test_atomic_cas():
    lock = torch.zeros(1, device=DEV, dtype=torch.int32)
    out = poisoned(64, torch.int32)
    K.cas_kernel[(64,)](lock, out, num_warps=1)
    vals = out.cpu().tolist()
    assert sorted(vals) == [0] + [1] * 63  # exactly one program saw the unlocked state
    assert lock.item() == 1


# ---- dot ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt,out_dt,M,N,Kd,bm,bn,bk,nw", [
    ("fp16", "fp16", 256, 192, 160, 64, 64, 32, 4),
    ("fp16", "fp16", 100, 70, 50, 64, 64, 32, 4),
    ("bf16", "fp32", 128, 128, 96, 32, 64, 32, 4),
    ("fp32", "fp32", 96, 64, 40, 32, 32, 16, 4),
    ("fp16", "fp32", 64, 64, 64, 64, 64, 64, 8),
])
def test_matmul(gen, dt, out_dt, M, N, Kd, bm, bn, bk, nw):
    a, b = randn((M, Kd), TD[dt], gen), randn((Kd, N), TD[dt], gen)
    c = poisoned((M, N), TD[out_dt])
    grid = (math.ceil(M / bm), math.ceil(N / bn))
    K.matmul_kernel[grid](a, b, c, M, N, Kd, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                          BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw)
    ref = a.double() @ b.double()
    tol = {"fp16": 2e-2, "bf16": 2e-2, "fp32": 1e-2}[out_dt if out_dt == "fp16" else dt]
    close(c, ref, atol=tol * math.sqrt(Kd), rtol=tol)


# ---- control flow / shapes ---------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 3, 7])
def test_control_flow(gen, n):
    x = randn(128, torch.float32, gen)
    y = poisoned(128, torch.float32)
    K.control_flow_kernel[(1,)](x, y, n, BLOCK=128)
    xd = x.double().cpu()
    if n > 4:
        v, tag = xd * 2.0, 1
    else:
        v, tag = xd + 1.0, 2
    v = v * (0.5 ** n)
    offs = torch.arange(128)
    acc = torch.zeros(128, dtype=torch.float64)
    for j in range(n):
        acc += torch.where(offs % 2 == j % 2, v, torch.zeros_like(v))
    close(y, acc + (n + tag), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("M,N", [(128, 64), (100, 37)])
def test_transpose(gen, M, N):
    x = randn((M, N), torch.float32, gen)
    y = poisoned((N, M), torch.float32)
    K.transpose_kernel[(math.ceil(M / 64), math.ceil(N / 64))](x, y, M, N, BM=64, BN=64)
    assert torch.equal(y.cpu(), x.t().cpu())


# ---- more language features -------------------------------------------------------------------

@pytest.mark.parametrize("N", [1000, 1024, 37])
def test_scan_variants(gen, N):
    x = randn(N, torch.float32, gen)
    ys, yp = poisoned(N, torch.float32), poisoned(N, torch.float32)
    K.scan_variants_kernel[(1,)](x, ys, yp, N, BLOCK=1024)
    xd = x.double().cpu()
    close(ys, torch.flip(torch.cumsum(torch.flip(xd, [0]), 0), [0]), atol=1e-3, rtol=1e-4)
    close(yp, torch.cumprod(1.0 + xd * 0.01, 0), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("M,N", [(64, 32), (50, 20)])
def test_minmax_index(gen, M, N):
    x = randn((M, N), torch.float16, gen)
    x[5, 3] = x[9, 3] = x[:, 3].min() - 1  # a tie in column 3: first row wins
    vmin, imin = poisoned(N, torch.float16), poisoned(N, torch.int32)
    vmax, imax = poisoned(M, torch.float16), poisoned(M, torch.int32)
    xo = poisoned(1, torch.int32)
    K.minmax_index_kernel[(1,)](x, vmin, imin, vmax, imax, xo, M, N, BM=64, BN=32)
    xc = x.cpu()
    assert torch.equal(vmin.cpu(), xc.min(0).values)
    assert torch.equal(imin.cpu().long(), torch.argmin(xc.float(), 0))
    assert imin[3].item() == 5
    assert torch.equal(vmax.cpu(), xc.max(1).values)
    assert torch.equal(imax.cpu().long(), torch.argmax(xc.float(), 1))
    bits = (xc.float() * 8.0).to(torch.int32)
    ref = 0
    for v in bits.flatten().tolist():
        ref ^= v
    assert xo.item() == ref


def test_total_sum(gen):
    x = randn((3, 32, 64), torch.float32, gen)
    out = poisoned(3, torch.float32)
    K.total_sum_kernel[(3,)](x, out, BM=32, BN=64)
    close(out, x.double().sum((1, 2)), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("n,flag", [(0, True), (3, False), (4, True)])
def test_loops(gen, n, flag):
    x = randn(256, torch.float16, gen, scale=4.0)
    y = poisoned(256, torch.float16)
    K.loops_kernel[(1,)](x, y, n, flag, 0.5, BLOCK=256)
    xd = x.double().cpu()
    acc = torch.zeros(256, dtype=torch.float64)
    for i in range(n):
        for j in range(2):
            acc = acc + xd if (i + j) % 2 == 0 else acc - 0.5 * xd
    v, k = xd.clone(), 0
    while v.abs().max() > 1.0:
        v, k = v * 0.5, k + 1
    if flag:
        acc = acc + v
    close(y, (acc * 0.5 + k), atol=2e-2, rtol=2e-3)


def test_atomic_bits(gen):
    n = 1000
    x = torch.randint(0, 2 ** 30, (n,), generator=gen, device=DEV, dtype=torch.int32)
    xchg = poisoned(n, torch.int32)
    a = torch.full((8,), -1, device=DEV, dtype=torch.int32)
    o = torch.zeros(8, device=DEV, dtype=torch.int32)
    xo = torch.zeros(8, device=DEV, dtype=torch.int32)
    K.atomic_bits_kernel[(math.ceil(n / 128),)](x, xchg, a, o, xo, n, BLOCK=128)
    assert torch.equal(xchg.cpu(), x.cpu())
    xs = x.cpu().tolist()
    for b in range(8):
        ra, ro, rx = -1, 0, 0
        for v in xs[b::8]:
            ra &= v
            ro |= v
            rx ^= v
        assert (a[b].item(), o[b].item(), xo[b].item()) == (ra, ro, rx)


def test_gather_i64(gen):
    n = 5000
    x = randn(20000, torch.float32, gen)
    idx = torch.randint(0, 20000, (n,), generator=gen, device=DEV, dtype=torch.int64)
    y = poisoned(n, torch.float32)
    K.gather_i64_kernel[(math.ceil(n / 512),)](x, idx, y, n, BLOCK=512)
    assert torch.equal(y.cpu(), x[idx].cpu())


def test_device_print_gpu(gen, capfd):
    """tl.device_print through vprintf: every element of a 2-D block once, with its pid and index,
    a scalar once per program, hex for two operands (the fp16 bit patterns)."""
    import re
    import struct

    x = randn((8, 4), torch.float32, gen)
    L.print_many_kernel[(2,)](x, BLOCK=8)
    torch.cuda.synchronize()
    out = capfd.readouterr().out.splitlines()
    vals = {}
    for ln in out:
        m = re.fullmatch(r"pid \((\d), 0, 0\) idx \((\d), (\d)\) x: (\S+)", ln)
        if m:
            key = tuple(int(g) for g in m.groups()[:3])
            assert key not in vals, f"printed twice: {ln}"
            vals[key] = float(m.group(4))
    xs = x.cpu()
    assert len(vals) == 2 * 32
    for (p, i, j), v in vals.items():
        assert abs(v - xs[i, j].item()) <= 1e-6 * max(1.0, abs(v)), (p, i, j, v)
    pids = [ln for ln in out if re.fullmatch(r"pid \(\d, 0, 0\) idx \(\) pid: \d", ln)]
    # a scalar is printed by every thread of the program, as Triton does (4 warps)
    assert sorted(set(pids)) == ["pid (0, 0, 0) idx () pid: 0", "pid (1, 0, 0) idx () pid: 1"] and len(pids) == 2 * 128
    hexes = {}
    for ln in out:
        m = re.fullmatch(r"pid \(0, 0, 0\) idx \((\d), (\d)\) h: \(operand (\d)\) 0x([0-9a-f]+)", ln)
        if m:
            hexes[(int(m.group(1)), int(m.group(2)), int(m.group(3)))] = int(m.group(4), 16)
    assert len(hexes) == 2 * 32
    for (i, j, k), bits in hexes.items():
        want = i + j if k == 0 else struct.unpack("<H", struct.pack("<e", xs[i, j].item()))[0]
        assert bits == want, (i, j, k, hex(bits))


ASSERT_SCRIPT = """
import sys, torch
sys.path.insert(0, {tests!r})
from kernels import language as L
x = torch.tensor([1, 2, 3, -4], dtype=torch.int32, device="cuda")
L.assert_kernel[(1,)](x, 3, BLOCK=4)       # the negative element is masked off: no failure
torch.cuda.synchronize()
print("first launch ok", flush=True)
L.assert_kernel[(1,)](x, 4, BLOCK=4)
torch.cuda.synchronize()
print("second launch ok", flush=True)
"""


@pytest.mark.parametrize("debug", ["1", "0"])
def test_device_assert_gpu(debug, tmp_path):
    """In debug mode (BLOCKTUNE_DEBUG=1, as TRITON_DEBUG) a false tl.device_assert stops the kernel
    with CUDA's device-side assert and prints the message with file:line; without it the assert
    costs nothing and does not fire (Triton's behaviour). In a subprocess: the context dies."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ, BLOCKTUNE_DEBUG=debug, BLOCKTUNE_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-c", ASSERT_SCRIPT.format(tests=tests)], env=env, capture_output=True,
                       text=True, timeout=120)
    out = p.stdout + p.stderr
    assert "first launch ok" in out, out
    if debug == "1":
        assert p.returncode != 0 and "second launch ok" not in out, out
        assert "x must be non-negative" in out and "language.py" in out, out
    else:
        assert p.returncode == 0 and "second launch ok" in out, out
