"""@autotune on a tensor-core matmul (`pytest -m gpu`; in interpret mode the autotuner runs the first
config without timing, as Triton's does): configs/key, prune_configs_by (early_config_prune,
perf_model + top_k), reset_to_zero, restore_value, warmup/rep, use_cuda_graph, best_config, one
tuning per key."""
from __future__ import annotations

import math

import pytest
torch = pytest.importorskip("torch", reason="runs the matmul tutorial's autotuned kernel over torch tensors (torch is not installed)")

import compiler as triton
import compiler.language as tl


pytestmark = pytest.mark.gpu
DEV = "cuda"


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch, tmp_path):
    """Tuning results are cached on disk too: start empty so that this run tunes."""
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path))


CONFIGS = [triton.Config({"BM": 16, "BN": 16, "BK": 16}, num_warps=1, num_stages=2),
           triton.Config({"BM": 32, "BN": 16, "BK": 16}, num_warps=2, num_stages=3),
           triton.Config({"BM": 16, "BN": 32, "BK": 32}, num_warps=4, num_stages=4),
           triton.Config({"BM": 64, "BN": 64, "BK": 16}, num_warps=4, num_stages=3)]
calls = {"prune": 0, "model": 0}


def early_prune(configs, named_args, **kwargs):
    calls["prune"] += 1
    return [c for c in configs if c.kwargs["BM"] <= named_args["M"]]


def perf_model(**kw):
    calls["model"] += 1
    return kw["BM"] * kw["BN"]  # smaller tiles "faster": the model ranks, top_k keeps 2


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"], reset_to_zero=["C"], restore_value=["S"],
                 prune_configs_by={"early_config_prune": early_prune, "perf_model": perf_model, "top_k": 2},
                 warmup=1, rep=1)
@triton.jit
def matmul_acc_kernel(A, B, C, S, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C += A @ B with an atomic add (so a re-run without reset_to_zero would double C); S is
    scribbled on (restore_value must undo it between the timing runs)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(A + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.atomic_add(C + rm[:, None] * N + rn[None, :], acc, mask=mask)
    if pid_n == 0:
        s = tl.load(S + rm, mask=rm < M)
        tl.store(S + rm, s + 1.0, mask=rm < M)


def launch(a, b, c, s):
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (math.ceil(M / meta["BM"]), math.ceil(N / meta["BN"]))  # noqa: E731
    matmul_acc_kernel[grid](a, b, c, s, M, N, K)


def test_autotune_matmul_features():
    g = torch.Generator(device=DEV).manual_seed(3)
    kern = matmul_acc_kernel
    kern.cache.clear()
    calls.update(prune=0, model=0)
    M, N, K = 40, 24, 48
    a, b = torch.randn(M, K, generator=g, device=DEV).half(), torch.randn(K, N, generator=g, device=DEV).half()
    c = torch.zeros(M, N, device=DEV)
    s = torch.zeros(M, device=DEV)
    launch(a, b, c, s)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 2e-3  # reset_to_zero: one product, not many
    assert torch.equal(s, torch.ones(M, device=DEV))                             # restore_value: one increment
    best = kern.best_config
    assert best is not None and best.kwargs["BM"] <= M
    assert calls["prune"] == 1 and calls["model"] >= 2
    assert best.kwargs["BM"] * best.kwargs["BN"] <= 512               # one of the model's top 2
    # same key: no new tuning, the cached config runs
    c2, s2 = torch.zeros(M, N, device=DEV), torch.zeros(M, device=DEV)
    launch(a, b, c2, s2)
    assert calls["prune"] == 1 and kern.best_config is best
    assert torch.allclose(c2, c) and torch.equal(s2, torch.ones(M, device=DEV))
    # a new key tunes again
    a3, b3 = torch.randn(16, 16, generator=g, device=DEV).half(), torch.randn(16, 16, generator=g, device=DEV).half()
    c3, s3 = torch.zeros(16, 16, device=DEV), torch.zeros(16, device=DEV)
    launch(a3, b3, c3, s3)
    assert calls["prune"] == 2 and kern.best_config.kwargs["BM"] == 16
    assert len(kern.cache) == 2


@triton.autotune(configs=CONFIGS[:3], key=["M", "N", "K"], use_cuda_graph=True)
@triton.jit
def matmul_graph_kernel(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(A + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def test_autotune_matmul_cuda_graph():
    g = torch.Generator(device=DEV).manual_seed(4)
    M, N, K = 96, 80, 64
    a, b = torch.randn(M, K, generator=g, device=DEV).half(), torch.randn(K, N, generator=g, device=DEV).half()
    c = torch.full((M, N), float("nan"), device=DEV)
    matmul_graph_kernel[lambda m: (math.ceil(M / m["BM"]), math.ceil(N / m["BN"]))](a, b, c, M, N, K)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 2e-3
    assert matmul_graph_kernel.best_config in CONFIGS[:3]
    assert matmul_graph_kernel.configs_timings is not None and len(matmul_graph_kernel.configs_timings) == 3
