"""Matrix multiplication: Triton's tutorial 03 under blocktune and under Triton, and cuBLAS (torch).

Both compilers run the same kernel text (bench/matmul_kernels.py, only the import lines differ)
with the same autotune list and key ["M", "N", "K"]: each framework's own autotuner picks its best
config per shape, then `matmul(a, b)` is timed end to end (host launch included, as in Triton's
tutorial). Where the two autotuners pick different configs, blocktune is also timed at Triton's
pick (`× Triton, same config`: the code generation alone, without the tuners' noise). Timing:
Triton's do_bench (CUDA events, L2 flush, median). Every result is checked against torch in
float64 first (relative-norm error).

Shapes (M×N×K), each in fp16 and bf16: the classic set 1024³, 2048³, 4096³, 8192³, 4096×4096×512,
8192×1024×4096, 16×4096×4096, and the LLM set M ∈ {1, 16, 128, 4096} × (N, K) ∈ {(4096, 4096),
(14336, 4096), (4096, 14336)} (a decoder layer's projections at batch·tokens = M).
`python bench/matmul.py [--quick] [--set classic|llm] [--dtype fp16|bf16] [--configs tutorial|extended]
[--persistent] [--mma-sync|--wgmma-sync] [--fp8] [--no-pointer-tma]`
(--quick: the shapes issue 12 names — fp16 4096³, 8192³, 4096×4096×512, bf16 1024³ — and one LLM
decode shape; --set/--dtype pick a part, for runs that must fit a time limit; --configs extended:
both autotuners get the tutorial's 16 configs plus the Hopper tiles of bench/matmul_configs.py
(64×256 and 128×256 with 8 warps, deeper stages, GROUP_SIZE_M 16); --persistent: both frameworks
run the persistent form of the same kernel (bench/matmul_persistent_kernels.py, #SMs programs
looping over the tiles) on the same configs; by default blocktune lowers
tl.dot on sm_90 with wgmma; --mma-sync: the sm_80 mma.sync path; --wgmma-sync: wgmma waited for at
each dot; --fp8: e4m3 inputs at 4096³ and 8192³ only, B stored K-major (column-major, as fp8 GEMMs
and torch._scaled_mm take it), the same kernel text and fp16 output; the cuBLAS column is then
torch._scaled_mm with unit scales; --no-pointer-tma: blocktune's backend keeps the pointer tiles on
cp.async (BLOCKTUNE_POINTER_TMA=0; by default it loads them through TMA where it proves them boxes of A
and B, compiler/backend/pointer_tma.py; --pointer-tma says the default explicitly).
Prints one line per shape, then a table with the geomean and the worst shape; writes
$OUT/matmul.json (matmul_mma_sync.json, matmul_persistent_extended.json, ...) when OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the shapes issue 12 names and one LLM decode shape")
    ap.add_argument("--set", choices=("classic", "llm"), help="one shape set (default: both)")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), help="one dtype (default: both)")
    ap.add_argument("--configs", choices=("tutorial", "extended"), default="tutorial",
                    help="the tutorial's 16 configs, or those plus the Hopper tiles of bench/matmul_configs.py")
    ap.add_argument("--persistent", action="store_true", help="the persistent form (bench/matmul_persistent_kernels.py)")
    ap.add_argument("--fp8", action="store_true", help="e4m3 inputs at 4096³ and 8192³, B K-major")
    tma = ap.add_mutually_exclusive_group()
    tma.add_argument("--pointer-tma", action="store_true",
                     help="blocktune loads the tutorial's pointer tiles through TMA (the default; BLOCKTUNE_POINTER_TMA=1)")
    tma.add_argument("--no-pointer-tma", action="store_true",
                     help="blocktune keeps the pointer tiles on cp.async (BLOCKTUNE_POINTER_TMA=0)")
    dot = ap.add_mutually_exclusive_group()
    dot.add_argument("--mma-sync", action="store_true", help="blocktune's sm_80 mma.sync path instead of wgmma")
    dot.add_argument("--wgmma-sync", action="store_true", help="wgmma waited for at each dot")
    return ap


# parsed before the compiler is imported: --mma-sync / --wgmma-sync set blocktune's tl.dot lowering
# (compiler.knobs.codegen.wgmma, part of the cache key), read when the kernels compile
ARGS = _parser().parse_args() if __name__ == "__main__" else _parser().parse_args([])
if ARGS.mma_sync:
    os.environ["BLOCKTUNE_WGMMA"] = "0"
if ARGS.pointer_tma or ARGS.no_pointer_tma:
    os.environ["BLOCKTUNE_POINTER_TMA"] = "0" if ARGS.no_pointer_tma else "1"
if ARGS.wgmma_sync:
    os.environ["BLOCKTUNE_WGMMA"] = "sync"
# a fresh compile cache unless one is given: compile times stay part of the tuning times
os.environ.setdefault("BLOCKTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="blocktune-matmul-"))

from common import geomean, load_as, load_twice  # noqa: E402
from matmul_configs import EXTENDED  # noqa: E402

import torch  # noqa: E402

tri, bt = load_twice("matmul_kernels.py")

if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

DEV = "cuda"
CLASSIC = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
           (4096, 4096, 512), (8192, 1024, 4096), (16, 4096, 4096)]
LLM = [(m, n, k) for m in (1, 16, 128, 4096) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))]
QUICK = [("fp16", 4096, 4096, 4096), ("fp16", 8192, 8192, 8192), ("fp16", 4096, 4096, 512), ("bf16", 1024, 1024, 1024),
         ("fp16", 16, 14336, 4096)]
FP8 = [("fp8e4m3", 4096, 4096, 4096), ("fp8e4m3", 8192, 8192, 8192)]
TD = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8e4m3": torch.float8_e4m3fn}
ROWS: list[dict] = []


def bench(fn):
    return do_bench(fn, warmup=100, rep=500, return_mode="median")


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def tflops(m, n, k, ms):
    return 2 * m * n * k * 1e-12 / (ms * 1e-3)


def fmt_cfg(cfg):
    if cfg is None:
        return "-"
    kw = cfg.kwargs
    return f"{kw['BLOCK_SIZE_M']}x{kw['BLOCK_SIZE_N']}x{kw['BLOCK_SIZE_K']} w{cfg.num_warps} s{cfg.num_stages}"


class Subject:
    """One framework's matmul under test: the tutorial's kernel (or, with --persistent, the
    persistent one of bench/matmul_persistent_kernels.py) behind that framework's autotuner."""

    def __init__(self, mod, persistent: bool, extended: bool):
        self.mod = mod
        configs = [(c.kwargs, c.num_warps, c.num_stages) for c in mod.get_autotune_config()]
        if extended:
            configs += EXTENDED
        configs = [mod.triton.Config(dict(kw), num_warps=w, num_stages=s) for kw, w, s in configs]
        self.persistent = persistent
        if persistent:
            self.pmod = load_as("matmul_persistent_kernels.py", "triton" if mod is tri else "blocktune")
            self.kernel = self.pmod.autotuned(configs)
            self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        else:
            self.kernel = mod.matmul_kernel
            if extended:
                self.kernel.configs = configs
                self.kernel.cache.clear()

    def matmul(self, a, b):
        if self.persistent:
            return self.pmod.matmul_persistent(self.kernel, a, b, self.sms)
        return self.mod.matmul(a, b)

    def at(self, cfg, a, b, c):
        """The kernel launched directly at `cfg` (no autotuner), run once; returns the launch."""
        m, k = a.shape
        n = b.shape[1]
        kw = dict(cfg.kwargs)
        tiles = -(-m // kw["BLOCK_SIZE_M"]) * -(-n // kw["BLOCK_SIZE_N"])
        if self.persistent:
            grid, kw["NUM_SMS"] = (min(self.sms, tiles),), self.sms
        else:
            grid, kw["ACTIVATION"] = (tiles,), ""
        args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        cfg = self.mod.triton.Config(kw, num_warps=cfg.num_warps, num_stages=cfg.num_stages)

        def go():
            self.kernel.fn[grid](*args, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **cfg.kwargs)
        c.fill_(float("nan"))
        go()
        torch.cuda.synchronize()
        return go


SUBJECTS: dict = {}


def make_inputs(dt, m, n, k):
    """A [M, K] row-major; B [K, N] row-major, or for fp8 K-major (a transposed [N, K] tensor)."""
    if dt == "fp8e4m3":
        a = torch.randn((m, k), device=DEV).to(TD[dt])
        b = torch.randn((n, k), device=DEV).to(TD[dt]).T
        return a, b
    return torch.randn((m, k), device=DEV, dtype=TD[dt]), torch.randn((k, n), device=DEV, dtype=TD[dt])


def vendor_matmul(dt, a, b):
    """cuBLAS through torch: torch.matmul, or for fp8 torch._scaled_mm (cuBLASLt fp8, unit scales)."""
    if dt == "fp8e4m3":
        one = torch.ones((), device=DEV)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.float16)
    return lambda: torch.matmul(a, b)


def same_key(cfg) -> tuple:
    return (tuple(sorted(cfg.kwargs.items())), cfg.num_warps, cfg.num_stages)


def tuner_timings(*cfgs) -> dict:
    """framework -> {config: median µs} for `cfgs`, as that framework's autotuner timed them in its
    last tuning (blocktune: the better of two passes for a config it timed twice)."""
    keys = {same_key(c) for c in cfgs}
    out = {}
    for name, sub in SUBJECTS.items():
        timings = getattr(sub.kernel, "configs_timings", None) or {}
        out[name] = {fmt_cfg(c): round((t[0] if isinstance(t, (list, tuple)) else t) * 1e3, 2)
                     for c, t in timings.items() if same_key(c) in keys}
    return out


def run_shape(dt, m, n, k):
    a, b = make_inputs(dt, m, n, k)
    ref = a.double() @ b.double()
    r = {"dtype": dt, "M": m, "N": n, "K": k}
    for name in ("blocktune", "triton"):
        sub = SUBJECTS.get(name)
        if sub is None:
            r[f"{name}_tflops"] = None
            continue
        sub.kernel.configs_timings = None   # set again only by a tuning (blocktune: not by its caches)
        t = time.perf_counter()
        c = sub.matmul(a, b)  # autotunes on the first call of this (M, N, K)
        torch.cuda.synchronize()
        r[f"{name}_tune_s"] = time.perf_counter() - t
        r[f"{name}_pick_cached"] = sub.kernel.configs_timings is None
        err = rel_err(c, ref)
        r[f"{name}_err"] = err
        if not err < 1e-2:
            raise AssertionError(f"{name} {dt} {m}x{n}x{k}: relative error {err:.3e}")
        ms = bench(lambda: sub.matmul(a, b))  # noqa: B023
        r[f"{name}_ms"] = ms
        r[f"{name}_tflops"] = tflops(m, n, k, ms)
        r[f"{name}_config"] = fmt_cfg(sub.kernel.best_config)
    vendor = vendor_matmul(dt, a, b)
    err = rel_err(vendor(), ref)
    if not err < 1e-2:
        raise AssertionError(f"cuBLAS {dt} {m}x{n}x{k}: relative error {err:.3e}")
    ms = bench(vendor)
    r["cublas_ms"] = ms
    r["cublas_tflops"] = tflops(m, n, k, ms)
    bt_t, tri_t = r["blocktune_tflops"], r["triton_tflops"]
    r["vs_triton"] = bt_t / tri_t if tri_t else None
    r["vs_cublas"] = bt_t / r["cublas_tflops"]
    r["vs_triton_same_config"] = r["vs_triton"]
    bt_cfg = SUBJECTS["blocktune"].kernel.best_config
    tri_cfg = SUBJECTS["triton"].kernel.best_config if "triton" in SUBJECTS else None
    if tri_cfg is not None and same_key(tri_cfg) != same_key(bt_cfg):
        # the tuners picked differently: both launched directly at Triton's pick (code generation alone)
        same = {}
        for name, sub in SUBJECTS.items():
            c = torch.empty((m, n), device=DEV, dtype=torch.float16)
            go = sub.at(tri_cfg, a, b, c)
            if not rel_err(c, ref) < 1e-2:
                raise AssertionError(f"{name} at {fmt_cfg(tri_cfg)} {dt} {m}x{n}x{k}: relative error {rel_err(c, ref):.3e}")
            same[name] = r[f"{name}_at_triton_config_ms"] = bench(go)
        r["vs_triton_same_config"] = same["triton"] / same["blocktune"]
        r["tuner_timings_us"] = tuner_timings(bt_cfg, tri_cfg)
        print(f"  the picks as each autotuner timed them (median µs): {r['tuner_timings_us']}", flush=True)
    ROWS.append(r)
    tuned = "pick cached, not tuned" if r["blocktune_pick_cached"] else f"tuned in {r['blocktune_tune_s']:.1f}s"
    print(f"{dt} {m}x{n}x{k}: blocktune {bt_t:6.1f} TFLOP/s [{r['blocktune_config']}, {tuned}]  "
          f"triton {tri_t or 0:6.1f} [{r.get('triton_config', '-')}]  cuBLAS {r['cublas_tflops']:6.1f}  "
          f"×triton {r['vs_triton'] or 0:.3f} (same config {r['vs_triton_same_config'] or 0:.3f})  "
          f"×cuBLAS {r['vs_cublas']:.3f}", flush=True)


def selected_shapes(args) -> list[tuple]:
    """The shapes of --set (classic, llm, or both) in the dtypes of --dtype (fp16, bf16, or both),
    each (dtype, M, N, K) once."""
    sets = {"classic": CLASSIC, "llm": LLM}
    which = [args.set] if args.set else ["classic", "llm"]
    dtypes = [args.dtype] if args.dtype else ["fp16", "bf16"]
    out = []
    for dt in dtypes:
        for s in which:
            for mnk in sets[s]:
                if (dt, *mnk) not in out:
                    out.append((dt, *mnk))
    return out


def main():
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {getattr(sys.modules.get('triton'), '__version__', 'absent')}; "
          f"blocktune dot: {dict(zip(('0', 'sync'), ('mma.sync', 'wgmma-sync'))).get(os.environ.get('BLOCKTUNE_WGMMA'), 'wgmma')}; "
          f"cache {os.environ['BLOCKTUNE_CACHE_DIR']}", flush=True)
    shapes = QUICK if ARGS.quick else FP8 if ARGS.fp8 else selected_shapes(ARGS)
    extended = ARGS.configs == "extended"
    for name, mod in (("blocktune", bt), ("triton", tri)):
        if mod is not None:
            SUBJECTS[name] = Subject(mod, ARGS.persistent, extended)
    for s in shapes:
        try:
            run_shape(*s)
        except Exception as e:  # keep going: one failing shape must not hide the others
            print(f"{s}: FAILED {type(e).__name__}: {e}", flush=True)
            ROWS.append({"dtype": s[0], "M": s[1], "N": s[2], "K": s[3], "error": f"{type(e).__name__}: {e}"})
    print("\n| dtype | M×N×K | blocktune TFLOP/s | Triton TFLOP/s | cuBLAS TFLOP/s | × Triton | × Triton, same config | × cuBLAS "
          "| blocktune config | Triton config |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in ROWS:
        shape = f"{r['M']}×{r['N']}×{r['K']}"
        if "error" in r:
            print(f"| {r['dtype']} | {shape} | failed: {r['error'][:80]} | | | | | | | |")
            continue
        print(f"| {r['dtype']} | {shape} | {r['blocktune_tflops']:.1f} | {r['triton_tflops'] or 0:.1f} | {r['cublas_tflops']:.1f} | "
              f"{r['vs_triton'] or 0:.3f} | {r['vs_triton_same_config'] or 0:.3f} | {r['vs_cublas']:.3f} | "
              f"{r['blocktune_config']} | {r.get('triton_config', '-')} |")
    for key, label in (("vs_triton", "× Triton"), ("vs_triton_same_config", "× Triton at the same config"),
                       ("vs_cublas", "× cuBLAS")):
        done = [r for r in ROWS if r.get(key)]
        if done:
            worst = min(done, key=lambda r: r[key])
            print(f"{label}: geomean {geomean([r[key] for r in done]):.3f}, worst {worst[key]:.3f} "
                  f"({worst['dtype']} {worst['M']}×{worst['N']}×{worst['K']})")
    if os.environ.get("OUT"):
        name = {"0": "matmul_mma_sync", "sync": "matmul_wgmma_sync"}.get(os.environ.get("BLOCKTUNE_WGMMA"), "matmul")
        name += ("_fp8" if ARGS.fp8 else "") + ("_persistent" if ARGS.persistent else "")
        name += "_no_pointer_tma" if os.environ.get("BLOCKTUNE_POINTER_TMA", "").strip().lower() in (
            "0", "false", "no", "off") else ""
        name += ("_extended" if extended else "") + ".json"
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            json.dump(ROWS, f, indent=1)


if __name__ == "__main__":
    main()
