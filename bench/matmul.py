"""Matrix multiplication: Triton's tutorial 03 under blocktune and under Triton, and cuBLAS (torch).

Both compilers run the same kernel text (bench/matmul_kernels.py, only the import lines differ)
with the same 16-config autotune list and key ["M", "N", "K"]: each framework's own autotuner picks
its best config per shape, then `matmul(a, b)` is timed end to end (host launch included, as in
Triton's tutorial). Timing: Triton's do_bench (CUDA events, L2 flush, median). Every result is
checked against torch in float64 first (relative-norm error).

Shapes (M×N×K), each in fp16 and bf16: the classic set 1024³, 2048³, 4096³, 8192³, 4096×4096×512,
8192×1024×4096, 16×4096×4096, and the LLM set M ∈ {1, 16, 128, 4096} × (N, K) ∈ {(4096, 4096),
(14336, 4096), (4096, 14336)} (a decoder layer's projections at batch·tokens = M).
`python bench/matmul.py [--quick] [--set classic|llm] [--dtype fp16|bf16] [--mma-sync|--wgmma-sync] [--fp8]`
(--quick: fp16 1024³ and 4096³ only; --set/--dtype pick a part, for runs that must fit a time limit;
--fp8: e4m3 inputs at 4096³ and 8192³ only, B stored K-major (column-major, as fp8 GEMMs and
torch._scaled_mm take it), the same kernel text and fp16 output; the cuBLAS column is then
torch._scaled_mm with unit scales;
by default blocktune lowers tl.dot on sm_90 with wgmma; --mma-sync: the sm_80 mma.sync path;
--wgmma-sync: wgmma waited for at each dot).
Prints one line per shape, then a table; writes $OUT/matmul.json (matmul_mma_sync.json, ...) when OUT is set.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

# blocktune's tl.dot on sm_90 is wgmma by default; --mma-sync measures the sm_80 path instead,
# --wgmma-sync waits for wgmma at each dot (compiler.knobs.codegen.wgmma, part of the cache key).
if "--mma-sync" in sys.argv:
    os.environ["BLOCKTUNE_WGMMA"] = "0"
if "--wgmma-sync" in sys.argv:
    os.environ["BLOCKTUNE_WGMMA"] = "sync"
# a fresh compile cache unless one is given: compile times stay part of the tuning times
os.environ.setdefault("BLOCKTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="blocktune-matmul-"))

from common import geomean, load_twice  # noqa: E402

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
QUICK = [("fp16", 1024, 1024, 1024), ("fp16", 4096, 4096, 4096)]
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


def run_shape(dt, m, n, k):
    a, b = make_inputs(dt, m, n, k)
    ref = a.double() @ b.double()
    r = {"dtype": dt, "M": m, "N": n, "K": k}
    for name, mod in (("blocktune", bt), ("triton", tri)):
        if mod is None:
            r[f"{name}_tflops"] = None
            continue
        t = time.perf_counter()
        c = mod.matmul(a, b)  # autotunes on the first call of this (M, N, K)
        torch.cuda.synchronize()
        r[f"{name}_tune_s"] = time.perf_counter() - t
        err = rel_err(c, ref)
        r[f"{name}_err"] = err
        if not err < 1e-2:
            raise AssertionError(f"{name} {dt} {m}x{n}x{k}: relative error {err:.3e}")
        ms = bench(lambda: mod.matmul(a, b))  # noqa: B023
        r[f"{name}_ms"] = ms
        r[f"{name}_tflops"] = tflops(m, n, k, ms)
        r[f"{name}_config"] = fmt_cfg(mod.matmul_kernel.best_config)
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
    ROWS.append(r)
    print(f"{dt} {m}x{n}x{k}: blocktune {bt_t:6.1f} TFLOP/s [{r['blocktune_config']}, tuned in {r['blocktune_tune_s']:.1f}s]  "
          f"triton {tri_t or 0:6.1f} [{r.get('triton_config', '-')}]  cuBLAS {r['cublas_tflops']:6.1f}  "
          f"×triton {r['vs_triton'] or 0:.3f}  ×cuBLAS {r['vs_cublas']:.3f}", flush=True)


def _arg(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def selected_shapes(argv) -> list[tuple]:
    """The shapes of --set (classic, llm, or both) in the dtypes of --dtype (fp16, bf16, or both),
    each (dtype, M, N, K) once."""
    sets = {"classic": CLASSIC, "llm": LLM}
    which = [_arg(argv, "--set")] if _arg(argv, "--set") else ["classic", "llm"]
    dtypes = [_arg(argv, "--dtype")] if _arg(argv, "--dtype") else ["fp16", "bf16"]
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
    shapes = QUICK if "--quick" in sys.argv else FP8 if "--fp8" in sys.argv else selected_shapes(sys.argv)
    for s in shapes:
        try:
            run_shape(*s)
        except Exception as e:  # keep going: one failing shape must not hide the others
            print(f"{s}: FAILED {type(e).__name__}: {e}", flush=True)
            ROWS.append({"dtype": s[0], "M": s[1], "N": s[2], "K": s[3], "error": f"{type(e).__name__}: {e}"})
    print("\n| dtype | M×N×K | blocktune TFLOP/s | Triton TFLOP/s | cuBLAS TFLOP/s | × Triton | × cuBLAS | blocktune config | Triton config |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in ROWS:
        shape = f"{r['M']}×{r['N']}×{r['K']}"
        if "error" in r:
            print(f"| {r['dtype']} | {shape} | failed: {r['error'][:80]} | | | | | | |")
            continue
        print(f"| {r['dtype']} | {shape} | {r['blocktune_tflops']:.1f} | {r['triton_tflops'] or 0:.1f} | {r['cublas_tflops']:.1f} | "
              f"{r['vs_triton'] or 0:.3f} | {r['vs_cublas']:.3f} | {r['blocktune_config']} | {r.get('triton_config', '-')} |")
    ratios = [r["vs_triton"] for r in ROWS if r.get("vs_triton")]
    if ratios:
        print(f"× Triton: geomean {geomean(ratios):.3f}, worst {min(ratios):.3f}")
    if os.environ.get("OUT"):
        name = {"0": "matmul_mma_sync.json", "sync": "matmul_wgmma_sync.json"}.get(os.environ.get("BLOCKTUNE_WGMMA"), "matmul.json")
        if "--fp8" in sys.argv:
            name = name.replace("matmul", "matmul_fp8")
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            json.dump(ROWS, f, indent=1)


if __name__ == "__main__":
    main()
