"""Fused attention (Triton's tutorial 06, Flash Attention v2) forward and backward on the GPU:
blocktune against Triton and torch's SDPA (flash backend) in the same run.

fp16, batch 4, 16 heads, N_CTX 1024 … 16384, HEAD_DIM 64 and 128, causal and not. Both compilers
run the same text (bench/attention_kernels.py: the autotuned forward with host tensor descriptors,
the three backward kernels) through its torch.autograd.Function; warp_specialize=False, or True with
--warp-specialize (on Hopper both then make the descriptors in the kernel and split the forward's
loop into a TMA producer warpgroup and wgmma consumers: compiler/backend/warp_specialize.py; Triton
3.6 itself aborts compiling that forward on an H100 — an MLIR dominance assertion that ends the
process — so there --warp-specialize runs with `--no-triton`). TFLOP/s count the tutorial's 4·B·H·N²·D per forward (half when causal)
and 2.5× that for the backward. Every output is first checked against SDPA. Timing: do_bench
median (CUDA events, L2 flush); the backward times `o.backward(do)` alone.

    python bench/attention.py            # the full sweep, the tutorial's 21 forward configs
    python bench/attention.py --quick    # N_CTX 1024 and 4096, 4 forward configs
    python bench/attention.py --quick --mode fwd --warp-specialize
    python bench/attention.py --quick --mode fwd --per-config --n-ctx 4096   # the code alone
Prints a table with × Triton ratios (and the forward config each autotuner picked) and writes JSON to
$OUT/attention.json (attention_ws.json with --warp-specialize) when OUT is set. --per-config also
times both compilers at every forward config of the list (each launched at that config alone), so
that the code generation is compared without the two autotuners' picks.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from common import geomean, load_twice, report, result_row

import torch

tri, bt = load_twice("attention_kernels.py")

if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

DEV = "cuda"
BATCH, HEADS = 4, 16
SM_SCALE = 1.3
ROWS: list[dict] = []
PER_CONFIG: list[dict] = []
WARP_SPECIALIZE = "--warp-specialize" in sys.argv


def bench(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def quick_configs(mod):
    """A few of the tutorial's forward configs (the large tiles Hopper prefers), for --quick."""
    return [c for c in mod._all_configs()
            if c.kwargs["BLOCK_M"] == 128 and c.num_stages in (2, 3)
            and (c.kwargs["BLOCK_N"], c.num_warps) in ((64, 4), (128, 8))]


def fmt_cfg(cfg) -> str:
    kw = cfg.kwargs
    return f"{kw['BLOCK_M']}x{kw['BLOCK_N']} w{cfg.num_warps} s{cfg.num_stages}"


def host_us(fn, calls=20) -> float:
    """Microseconds of host time one call takes to submit its work (the GPU not waited for): where
    it exceeds the kernel's own time, do_bench measures the host."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    return us


def time_each_config(q, k, v, causal, ref, label, flops):
    """Both compilers launched at each forward config of the list alone (their autotuners then have
    nothing to pick), checked against SDPA and timed: the code generation without the tuners' noise.
    Each is timed twice, in the order blocktune, Triton, Triton, blocktune, and keeps its better
    median (drift between the two compilers' turns — clocks, a busy host — shows as two passes
    that disagree, printed)."""
    mods = {name: mod for name, mod in (("blocktune", bt), ("triton", tri)) if mod is not None}
    tuned = {name: (mod._attn_fwd.configs, dict(mod._attn_fwd.cache)) for name, mod in mods.items()}
    try:
        for name_cfg in [fmt_cfg(c) for c in bt._attn_fwd.configs]:
            cfgs = {name: next(c for c in tuned[name][0] if fmt_cfg(c) == name_cfg) for name in mods}
            one = cfgs["blocktune"]
            if one.kwargs["BLOCK_N"] > q.shape[-1] or one.kwargs["BLOCK_M"] > q.shape[2]:
                continue   # the kernel's static_assert (BLOCK_N <= HEAD_DIM), the autotuner's prune
            runs = {}
            for name, mod in mods.items():
                mod._attn_fwd.configs = [cfgs[name]]
                mod._attn_fwd.cache.clear()
                out = mod.attention(q, k, v, causal, SM_SCALE, WARP_SPECIALIZE)
                torch.cuda.synchronize()
                check(f"{name} fwd {label} at {name_cfg}", out, ref)
                runs[name] = (lambda m: lambda: m.attention(q, k, v, causal, SM_SCALE, WARP_SPECIALIZE))(mod)
            passes = {name: [] for name in mods}
            order = list(mods) + list(reversed(mods))
            for name in order:
                passes[name].append(bench(runs[name]))
            row = {"shape": label, "config": name_cfg}
            for name in mods:
                row[f"{name}_ms"] = min(passes[name])
                row[f"{name}_ms_passes"] = passes[name]
                row[f"{name}_host_us"] = host_us(runs[name])
            t_bt, t_tri = row["blocktune_ms"], row.get("triton_ms")
            row["vs_triton"] = t_tri / t_bt if t_tri else None
            PER_CONFIG.append(row)
            print(f"  at {name_cfg}: blocktune {flops / (t_bt * 1e9):6.1f} TFLOP/s  triton "
                  f"{flops / (t_tri * 1e9) if t_tri else 0:6.1f}  ×triton {row['vs_triton'] or 0:.3f}  "
                  f"(passes µs: " + ", ".join(f"{n} {' / '.join(f'{t * 1e3:.1f}' for t in passes[n])}" for n in mods) +
                  "; host µs a call: " + ", ".join(f"{n} {row[f'{n}_host_us']:.0f}" for n in mods) + ")", flush=True)
    finally:
        for name, mod in mods.items():
            mod._attn_fwd.configs = tuned[name][0]
            mod._attn_fwd.cache.clear()
            mod._attn_fwd.cache.update(tuned[name][1])


def sdpa(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=SM_SCALE)


def check(name, got, ref):
    err = (got.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    if not err <= 2e-2 * max(scale, 1.0):
        raise AssertionError(f"{name}: wrong result (max abs error {err}, reference scale {scale})")


def run_case(n_ctx, head_dim, causal, mode, per_config=False):
    shape = (BATCH, HEADS, n_ctx, head_dim)
    q, k, v = (torch.randn(shape, device=DEV, dtype=torch.float16).requires_grad_() for _ in range(3))
    do = torch.randn_like(q)
    ref = sdpa(q, k, v, causal)
    ref_grads = torch.autograd.grad(ref, (q, k, v), do, retain_graph=True) if mode == "bwd" else None
    if mode == "fwd":
        t_torch = bench(lambda: sdpa(q, k, v, causal))
    else:
        t_torch = bench(lambda: torch.autograd.grad(ref, (q, k, v), do, retain_graph=True))
    times, picks, host = {}, {}, {}
    label = f"N={n_ctx} D={head_dim}{' causal' if causal else ''}{' ws' if WARP_SPECIALIZE else ''}"
    for name, mod in (("blocktune", bt), ("triton", tri)):
        if mod is None:
            times[name] = None
            continue
        out = mod.attention(q, k, v, causal, SM_SCALE, WARP_SPECIALIZE)
        torch.cuda.synchronize()
        check(f"{name} {mode} {label} out", out, ref)
        if mode == "fwd":
            times[name] = bench(lambda: mod.attention(q, k, v, causal, SM_SCALE, WARP_SPECIALIZE))
            picks[name] = fmt_cfg(mod._attn_fwd.best_config)
            host[name] = round(host_us(lambda: mod.attention(q, k, v, causal, SM_SCALE, WARP_SPECIALIZE)))
            continue
        grads = torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
        for what, got, want in zip(("dq", "dk", "dv"), grads, ref_grads):
            check(f"{name} {mode} {label} {what}", got, want)
        times[name] = bench(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
    flops = 4.0 * BATCH * HEADS * n_ctx * n_ctx * head_dim * (0.5 if causal else 1.0) * (2.5 if mode == "bwd" else 1.0)
    ROWS.append(result_row(f"attention_{mode}", label, flops / 1e12, "tflops", times, t_torch))
    if picks:
        ROWS[-1].update({f"{name}_config": c for name, c in picks.items()})
        ROWS[-1].update({f"{name}_host_us": us for name, us in host.items()})
        print(f"  picks: {picks}; host µs a call: {host}", flush=True)
    if per_config and mode == "fwd":
        time_each_config(q, k, v, causal, ref, label, flops)
    del q, k, v, do, ref, ref_grads
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="N_CTX 1024 and 4096 only, 4 forward configs")
    ap.add_argument("--mode", choices=("fwd", "bwd", "both"), default="both")
    ap.add_argument("--head-dim", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--n-ctx", type=int, nargs="*", help="sequence lengths (default 1024 and 4096 with --quick, else 1024 … 16384)")
    ap.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    ap.add_argument("--per-config", action="store_true",
                    help="forward: also time both compilers at every config of the list alone (the code without the tuners)")
    ap.add_argument("--warp-specialize", action="store_true",
                    help="warp_specialize=True: the forward's loop split into producer and consumer warps")
    ap.add_argument("--no-triton", action="store_true",
                    help="blocktune and SDPA only (Triton 3.6 aborts on the warp-specialized forward on Hopper)")
    args = ap.parse_args()
    global tri
    if args.no_triton:
        tri = None
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {getattr(sys.modules.get('triton'), '__version__', 'absent')}", flush=True)
    if args.quick:
        for mod in (bt, tri):
            if mod is not None:
                mod._attn_fwd.configs = quick_configs(mod)
    n_ctxs = args.n_ctx or ([1024, 4096] if args.quick else [1024, 2048, 4096, 8192, 16384])
    causals = {"yes": (True,), "no": (False,), "both": (True, False)}[args.causal]
    modes = ("fwd", "bwd") if args.mode == "both" else (args.mode,)
    for mode in modes:
        for head_dim in args.head_dim:
            for causal in causals:
                for n_ctx in n_ctxs:
                    run_case(n_ctx, head_dim, causal, mode, args.per_config)
    report(ROWS, "attention", "tflops", "attention_ws.json" if WARP_SPECIALIZE else "attention.json")
    if PER_CONFIG:
        print("\n| shape | config | × Triton (same config) |\n|---|---|---|")
        for r in PER_CONFIG:
            print(f"| {r['shape']} | {r['config']} | {r['vs_triton'] or 0:.3f} |")
        ratios = [r["vs_triton"] for r in PER_CONFIG if r["vs_triton"]]
        if ratios:
            print(f"attention fwd at the same config: geomean × Triton {geomean(ratios):.3f}, worst {min(ratios):.3f}")
        if os.environ.get("OUT"):
            with open(os.path.join(os.environ["OUT"], "attention_per_config.json"), "w") as f:
                json.dump(PER_CONFIG, f, indent=1)


if __name__ == "__main__":
    main()
