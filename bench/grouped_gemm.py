"""Grouped GEMM (Triton's tutorial 08) on the GPU: blocktune against Triton and torch in the same run.

Groups of 4 square fp16 problems N×N×N, N ∈ 128 … 2048 (the tutorial's sweep). Both compilers run
the same text (bench/grouped_gemm_kernels.py), autotuned over the tutorial's configs; torch runs
one torch.matmul per problem. Every output is checked against torch first. Timing: do_bench median.

The tutorial's autotuner is keyed on `group_size` only, so left alone each compiler picks its config
at the first size and keeps it for every later one, and the ratios compare two picks made at 128³
as much as two compilers (2026-11-26 16:40: blocktune's pick at 4×128³, 64×64×32, was right there
and 0.32× Triton's pick at 2048³). By default both autotuners therefore tune again at every size
(their in-memory caches cleared, blocktune's disk cache of autotune results off), as if the key held
N; `--tutorial-key` keeps the tutorial's behaviour. The configs each side picked are printed (and
kept in the JSON). `--per-config`
also times every config on both sides at every size — the code-generation comparison, config for
config — and the ratio of each side's best config per size.

    python3 bench/grouped_gemm.py [N ...] [--per-config] [--tutorial-key]

Prints TFLOP/s with × Triton ratios and writes JSON to $OUT/grouped_gemm.json (and, with
--per-config, $OUT/grouped_gemm_per_config.json) when OUT is set.
"""
from __future__ import annotations

import argparse
import sys

from common import geomean, load_twice, report, result_row

import torch

tri, bt = load_twice("grouped_gemm_kernels.py")

if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

DEV = "cuda"
GROUP = 4
ROWS: list[dict] = []
PER_CONFIG: list[dict] = []


def bench(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def config_label(cfg) -> str:
    k = cfg.kwargs
    return f"{k['BLOCK_SIZE_M']}x{k['BLOCK_SIZE_N']}x{k['BLOCK_SIZE_K']} sm{k['NUM_SM']} w{cfg.num_warps} s{cfg.num_stages}"


def checked(name, n, Cs, refs):
    torch.cuda.synchronize()
    for i, (c, ref) in enumerate(zip(Cs, refs)):
        if not torch.allclose(c.float(), ref.float(), atol=1e-2 * n ** 0.5, rtol=1e-2):
            raise AssertionError(f"{name} grouped gemm N={n} problem {i}: wrong result")


def forget_tuning(autotuner) -> None:
    """The next launch tunes again at this size (both frameworks' Autotuner keep `cache`; blocktune
    also reads results back from its disk cache unless `cache_results` is off)."""
    autotuner.cache.clear()
    if hasattr(autotuner, "cache_results"):
        autotuner.cache_results = False


def run_case(n, per_config, retune):
    As = [torch.rand(n, n, device=DEV, dtype=torch.float16) for _ in range(GROUP)]
    Bs = [torch.rand(n, n, device=DEV, dtype=torch.float16) for _ in range(GROUP)]
    refs = [a @ b for a, b in zip(As, Bs)]
    t_torch = bench(lambda: [torch.matmul(a, b) for a, b in zip(As, Bs)])
    mods = (("blocktune", bt), ("triton", tri))
    times, picked, tuned = {}, {}, {}
    for name, mod in mods:
        if mod is None:
            times[name] = None
            continue
        args, Cs = mod.group_gemm_args(As, Bs)
        launch = lambda: mod.grouped_matmul_autotuned[lambda meta: (meta['NUM_SM'], )](*args)  # noqa: E731
        if retune:
            forget_tuning(mod.grouped_matmul_autotuned)
        launch()  # autotunes (with --tutorial-key at the first size only: the key is group_size)
        checked(name, n, Cs, refs)
        times[name] = bench(launch)
        picked[name] = config_label(mod.grouped_matmul_autotuned.best_config)
        tuned[name] = {config_label(c): round((t[0] if isinstance(t, (list, tuple)) else t) * 1e3, 2)
                       for c, t in (getattr(mod.grouped_matmul_autotuned, "configs_timings", None) or {}).items()}
    row = result_row("grouped_gemm", f"{GROUP}x{n}^3", 2 * n ** 3 * GROUP / 1e12, "tflops", times, t_torch)
    row["configs"] = picked
    print(f"  configs in use: {picked}", flush=True)
    if retune or not ROWS:   # the tuning happened at this size: how each autotuner timed every config
        row["tuner_timings_us"] = tuned
        print(f"  each autotuner's timings (median µs): {tuned}", flush=True)
    ROWS.append(row)
    if not per_config:
        return
    for cfg in bt.grouped_configs():
        label = config_label(cfg)
        times = {}
        for name, mod in mods:
            if mod is None:
                times[name] = None
                continue
            args, Cs = mod.group_gemm_args(As, Bs)
            same = next(c for c in mod.grouped_configs() if config_label(c) == label)
            meta = dict(same.kwargs, num_warps=same.num_warps, num_stages=same.num_stages)
            launch = lambda: mod.grouped_matmul_kernel[(meta["NUM_SM"], )](*args, **meta)  # noqa: E731
            launch()
            checked(f"{name} [{label}]", n, Cs, refs)
            times[name] = bench(launch)
        r = result_row(f"grouped_gemm [{label}]", f"{GROUP}x{n}^3", 2 * n ** 3 * GROUP / 1e12, "tflops", times, t_torch)
        r["n"], r["config"] = n, label
        PER_CONFIG.append(r)


def best_per_size():
    """Each side's best config at each size: the ratio a per-size autotuning would give."""
    for n in sorted({r["n"] for r in PER_CONFIG}):
        rows = [r for r in PER_CONFIG if r["n"] == n]
        bt_best = min(rows, key=lambda r: r["blocktune_ms"])
        tri_best = min((r for r in rows if r["triton_ms"]), key=lambda r: r["triton_ms"], default=None)
        ratio = tri_best["triton_ms"] / bt_best["blocktune_ms"] if tri_best else None
        print(f"best per size {GROUP}x{n}^3: blocktune {bt_best['config']} {bt_best['blocktune_ms']:.4f} ms, "
              f"triton {tri_best['config'] if tri_best else '-'} {tri_best['triton_ms'] if tri_best else 0:.4f} ms, "
              f"×triton {ratio or 0:.3f}")
    by_cfg = {}
    for r in PER_CONFIG:
        by_cfg.setdefault(r["config"], []).append(r["vs_triton"])
    for label, ratios in by_cfg.items():
        print(f"config {label}: geomean × Triton {geomean(ratios):.3f}, worst {min((r for r in ratios if r), default=0):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sizes", type=int, nargs="*", default=[2 ** i for i in range(7, 12)],
                    help="N of the 4 N×N×N problems (default: 128 … 2048)")
    ap.add_argument("--per-config", action="store_true", help="also every config on both sides at every size")
    ap.add_argument("--tutorial-key", action="store_true",
                    help="tune once, at the first size, as the tutorial's key (group_size) does")
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {getattr(sys.modules.get('triton'), '__version__', 'absent')}", flush=True)
    per_config = args.per_config
    for n in args.sizes:
        run_case(n, per_config, retune=not args.tutorial_key)
    report(ROWS, "grouped_gemm", "tflops", "grouped_gemm.json")
    if per_config:
        report(PER_CONFIG, "grouped_gemm per config", "tflops", "grouped_gemm_per_config.json")
        best_per_size()


if __name__ == "__main__":
    main()
