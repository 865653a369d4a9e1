"""The autotuner's pick is (near) the fastest config when timed with care (`pytest -m gpu`).

The case bench/matmul.py caught: fp16 4096×4096×512 (a ~40 µs GEMM) tuned right after a heavy
GEMM load, where the first config in the list (128×256×64, the fastest) lost to a ~10% slower tile
(most likely timed while the clocks had not recovered: the timing protocol is Triton's). After tuning, every config is timed again with more
repetitions, twice in alternating order, and the pick must be within 5% of the best of them.
"""
from __future__ import annotations

import time

import pytest
torch = pytest.importorskip("torch", reason="times the matmul tutorial's kernel over torch tensors (torch is not installed)")

import compiler as triton
from compiler.testing import do_bench
from tests.compiler.kernels.tutorials import matmul_kernel
from tests.compiler.kernels.util import gen, rand  # noqa: F401

pytestmark = pytest.mark.gpu
DEV = "cuda"

TILES = [(128, 256, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4), (128, 128, 64, 4, 4),
         (64, 128, 64, 4, 4)]


def config(bm, bn, bk, warps, stages):
    return triton.Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8},
                         num_warps=warps, num_stages=stages)


def tile_of(cfg) -> tuple:
    kw = cfg.kwargs
    return (kw["BLOCK_SIZE_M"], kw["BLOCK_SIZE_N"], kw["BLOCK_SIZE_K"], cfg.num_warps, cfg.num_stages)


def label(tile) -> str:
    return "{}x{}x{} w{} s{}".format(*tile)


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch, tmp_path):
    """Tuning results are cached on disk too: start empty so that this run tunes."""
    monkeypatch.setenv("BLOCKTUNE_CACHE_DIR", str(tmp_path))


def heavy_load(seconds: float):
    """Back-to-back 8192³ fp16 GEMMs: the GPU at its power limit, as after a large benchmark."""
    x = torch.randn((8192, 8192), device=DEV, dtype=torch.float16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            x @ x
        torch.cuda.synchronize()


def test_the_pick_after_a_heavy_load_is_within_5_percent_of_the_best(gen):
    m, n, k = 4096, 4096, 512
    a, b = rand(gen, (m, k), torch.float16).to(DEV), rand(gen, (k, n), torch.float16).to(DEV)
    c = torch.full((m, n), float("nan"), device=DEV, dtype=torch.float16)
    tuned = triton.autotune(configs=[config(*t) for t in TILES], key=["M", "N", "K"])(matmul_kernel.fn)
    args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_SIZE_M"]) * triton.cdiv(n, meta["BLOCK_SIZE_N"]),)
    tuned.warmup(*args, grid=grid, ACTIVATION="")      # compile every config first: only timing differs
    heavy_load(1.0)
    tuned[grid](*args, ACTIVATION="")
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2

    careful: dict = {}
    for order in (TILES, TILES[::-1]):
        for t in order:
            cfg = config(*t)

            def go(cfg=cfg):
                matmul_kernel.fn[grid](*args, ACTIVATION="", num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                                       **cfg.kwargs)
            ms = do_bench(go, warmup=100, rep=300, return_mode="median")
            careful[t] = min(careful.get(t, ms), ms)
    picked = tile_of(tuned.best_config)
    best = min(careful, key=careful.get)
    print("careful µs:", {label(t): round(ms * 1e3, 1) for t, ms in careful.items()}, "picked", label(picked))
    print("tuner's µs:", {label(tile_of(c)): round(t[0] * 1e3, 1) for c, t in tuned.configs_timings.items()},
          "timed twice:", [label(tile_of(c)) for c in tuned.confirm_timings])
    assert careful[picked] <= 1.05 * careful[best], f"picked {picked} ({careful[picked]:.4f} ms), best {best} ({careful[best]:.4f} ms)"
