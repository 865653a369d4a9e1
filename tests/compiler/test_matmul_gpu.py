"""tl.dot and Triton's tutorial 03 on the GPU against torch in float64 (`pytest -m gpu`).

Fresh random inputs each run (seed printed), NaN-poisoned outputs, relative-norm error
‖out − ref‖ / ‖ref‖ within the input precision's tolerance; odd sizes (M, N, K not multiples of the
block), transposed operands (tl.trans in the kernel, and column-major tensors).
"""
from __future__ import annotations

import math
import secrets

import pytest

torch = pytest.importorskip("torch")

import dot_kernels as DK  # noqa: E402
from test_dot_mma import RTOL, load_tutorial, rel_err, run_dot  # noqa: E402

pytestmark = pytest.mark.gpu
DEV = "cuda"


@pytest.fixture
def g():
    seed = secrets.randbits(31)
    print(f"seed={seed}")
    gen = torch.Generator(device=DEV)
    gen.manual_seed(seed)
    return gen


CASES = [  # dt, prec, M, N, K, bm, bn, bk, nw
    ("fp16", "tf32", 256, 192, 160, 64, 64, 32, 4),
    ("fp16", "tf32", 100, 70, 50, 64, 64, 32, 4),
    ("fp16", "tf32", 129, 257, 95, 128, 128, 32, 4),
    ("fp16", "tf32", 33, 17, 200, 16, 16, 16, 1),
    ("fp16", "tf32", 300, 40, 64, 256, 16, 16, 8),
    ("fp16", "tf32", 64, 500, 72, 16, 256, 32, 4),
    ("bf16", "tf32", 128, 128, 96, 32, 64, 32, 4),
    ("bf16", "tf32", 77, 99, 111, 64, 32, 64, 8),
    ("fp32", "tf32", 96, 64, 40, 32, 32, 16, 4),
    ("fp32", "tf32", 130, 66, 100, 64, 32, 32, 4),
    ("fp32", "ieee", 96, 64, 40, 32, 32, 16, 4),
]


@pytest.mark.parametrize("dt,prec,M,N,K,bm,bn,bk,nw", CASES)
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_dot_gpu(g, dt, prec, M, N, K, bm, bn, bk, nw, trans_a, trans_b):
    err, tol = run_dot(dt, M, N, K, bm, bn, bk, trans_a, trans_b, prec, device=DEV, nw=nw, g=g)
    assert err < tol, err


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("dt,M,N,K", [("fp16", 256, 256, 16), ("fp16", 192, 320, 48), ("fp16", 128, 256, 1024),
                                      ("bf16", 160, 96, 208), ("fp16", 100, 70, 64)])
def test_dot_pipelined_gpu(g, stages, dt, M, N, K):
    """The cp.async pipeline (M, N, K multiples of 16: aligned rows) at every depth, with loops
    shorter than the pipeline (K = 16, 48) and longer."""
    err, tol = run_dot(dt, M, N, K, 64, 64, 16, 0, 0, "tf32", device=DEV, nw=4, g=g, num_stages=stages)
    assert err < tol, err


@pytest.mark.parametrize("dt", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("col_a,col_b", [(True, False), (False, True), (True, True)])
def test_dot_column_major_gpu(g, dt, col_a, col_b):
    err, tol = run_dot(dt, 200, 136, 88, 64, 64, 32, 0, 0, "tf32", device=DEV, nw=4, col_a=col_a, col_b=col_b, g=g)
    assert err < tol, err


def test_dot_out_dtype_and_allow_tf32_gpu(g):
    a = torch.randn(32, 16, generator=g, device=DEV).half()
    b = torch.randn(16, 64, generator=g, device=DEV).half()
    d = torch.full((32, 64), float("nan"), dtype=torch.float16, device=DEV)
    DK.dot_out_dtype_kernel[(1,)](a, b, d, BM=32, BN=64, BK=16, ALLOW_TF32=True)
    assert rel_err(d, a.double() @ b.double()) < 2e-3
    a = torch.randn(32, 16, generator=g, device=DEV)
    b = torch.randn(16, 64, generator=g, device=DEV)
    d = torch.full((32, 64), float("nan"), device=DEV)
    DK.dot_out_dtype_kernel[(1,)](a, b, d, BM=32, BN=64, BK=16, ALLOW_TF32=False)
    assert rel_err(d, a.double() @ b.double()) < 1e-6
    DK.dot_out_dtype_kernel[(1,)](a, b, d, BM=32, BN=64, BK=16, ALLOW_TF32=True)
    assert rel_err(d, a.double() @ b.double()) < RTOL["tf32"]


@pytest.mark.parametrize("M,N,K", [(512, 512, 512), (1000, 600, 300), (77, 1030, 264), (16, 4096, 512)])
@pytest.mark.parametrize("activation", ["", "leaky_relu"])
def test_tutorial_gpu(g, M, N, K, activation):
    """All 16 configs of the tutorial's autotune list run (the tuner times every one), then the
    best one's result is checked."""
    mod = load_tutorial()
    kern = mod.matmul_kernel
    kern.configs = mod.get_autotune_config()
    kern.cache.clear()
    a = torch.randn(M, K, generator=g, device=DEV).half()
    b = torch.randn(K, N, generator=g, device=DEV).half()
    c = mod.matmul(a, b, activation)
    ref = a.double() @ b.double()
    if activation:
        ref = torch.where(ref >= 0, ref, 0.01 * ref)
    assert rel_err(c, ref) < RTOL["fp16"], kern.best_config
    # every config, not only the fastest, must be right
    for cfg in kern.configs:
        out = torch.full((M, N), float("nan"), device=DEV, dtype=torch.float16)
        grid = (math.ceil(M / cfg.kwargs["BLOCK_SIZE_M"]) * math.ceil(N / cfg.kwargs["BLOCK_SIZE_N"]),)
        kern.fn[grid](a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                      ACTIVATION=activation, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **cfg.kwargs)
        assert rel_err(out, ref) < RTOL["fp16"], cfg


@pytest.mark.skipif(bool(__import__("os").environ.get("BLOCKTUNE_WGMMA")), reason="already a re-run")
@pytest.mark.parametrize("mode", ["0", "sync"])
def test_wgmma_suite_gpu(tmp_path, mode):
    """This file again with BLOCKTUNE_WGMMA=0 (the mma.sync path) and =sync (wgmma waited at each
    dot); the plain run is the default (wgmma on sm_90, one group in flight across K iterations).
    In a child process with an empty compile cache: the switch is read at compile time."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, BLOCKTUNE_WGMMA=mode, BLOCKTUNE_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", "gpu", "-p", "no:cacheprovider", __file__],
                       env=env, capture_output=True, text=True, cwd=os.path.dirname(__file__))
    tail = (p.stdout + p.stderr)[-6000:]
    print(tail)
    assert p.returncode == 0, tail
