"""Tutorial 09's tensor-descriptor matmuls under blocktune and under Triton, and cuBLAS (torch).

Both compilers run the same kernel text (bench/persistent_matmul_kernels.py, only the import lines differ)
behind their own autotuners over the same configs: `tma` (host descriptors, a program per tile),
`tma_persistent` (host descriptors, #SMs programs) and `descriptor_persistent` (descriptors made
in the kernel; `--ws` adds its warp-specialized form, `tl.range(..., warp_specialize=True)`).
fp16 inputs, B K-major ([N, K], as the tutorial), fp32 accumulation, fp16 output; every result
checked against torch in float64 first; timing: do_bench (CUDA events, L2 flush, median), and each
kernel's own GPU time from CUPTI (bench/common.gpu_kernel_us): where the benchmark path's host work
(a new C, three descriptors, the autotuner: 50-90 µs a call on the H100) outruns the flush, do_bench
times the host, and the row says so; the last line gives the ratio by GPU time.

`python bench/matmul_tma.py [--quick] [--ws] [--kernels tma,tma_persistent,...]`
(--quick: 4096³ and 8192³ only). Prints one line per (kernel, shape), then a table with the
geomean and the worst ratio to Triton; writes $OUT/matmul_tma.json when OUT is set.
"""
from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("BLOCKTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="blocktune-matmul-tma-"))

from common import geomean, gpu_kernel_us, load_twice, report, result_row  # noqa: E402

import torch  # noqa: E402

tri, bt = load_twice("persistent_matmul_kernels.py")
if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 512), (8192, 1024, 4096), (1024, 1024, 1024)]
QUICK = [(4096, 4096, 4096), (8192, 8192, 8192)]
KERNELS = ("tma", "tma_persistent", "descriptor_persistent")


def runner(mod, kernel: str, sms: int):
    """kernel name -> c = f(a, b), the kernel behind this framework's autotuner (one per framework and name)."""
    key = (id(mod), kernel)
    if key not in _TUNED:
        if kernel == "tma":
            k = mod.autotuned(mod.matmul_kernel_tma, mod.configs(True))
            _TUNED[key] = k, lambda a, b: mod.matmul_tma(k, a, b)
        elif kernel == "tma_persistent":
            k = mod.autotuned(mod.matmul_kernel_tma_persistent, mod.configs(True))
            _TUNED[key] = k, lambda a, b: mod.matmul_tma_persistent(k, a, b, sms)
        else:
            k = mod.autotuned(mod.matmul_kernel_descriptor_persistent, mod.configs(False), ("M", "N", "K", "WARP_SPECIALIZE"))
            ws = kernel.endswith("_ws")
            _TUNED[key] = k, lambda a, b: mod.matmul_descriptor_persistent_tuned(k, a, b, sms, ws)
    return _TUNED[key]


def fmt_config(cfg) -> str:
    kw = cfg.kwargs
    return f"{kw['BLOCK_SIZE_M']}x{kw['BLOCK_SIZE_N']}x{kw['BLOCK_SIZE_K']} w{cfg.num_warps} s{cfg.num_stages}"


_TUNED: dict = {}


def run(kernel: str, m: int, n: int, k: int, sms: int) -> dict:
    a = torch.randn((m, k), device="cuda", dtype=torch.float16)
    b = torch.randn((n, k), device="cuda", dtype=torch.float16)
    ref = a.double() @ b.double().T
    times, picks, gpu = {"triton": None}, {}, {}
    for name, mod in (("blocktune", bt), ("triton", tri)):
        if mod is None:
            continue
        tuned, fn = runner(mod, kernel, sms)
        c = fn(a, b)  # autotunes on the first call of this shape
        err = ((c.double() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            raise AssertionError(f"{name} {kernel} {m}x{n}x{k}: relative error {err:.3e}")
        times[name] = do_bench(lambda: fn(a, b), warmup=100, rep=500, return_mode="median")  # noqa: B023
        gpu[name] = gpu_kernel_us(lambda: fn(a, b), "matmul_kernel")  # noqa: B023
        picks[name] = fmt_config(tuned.best_config)
    t_torch = do_bench(lambda: torch.matmul(a, b.T), warmup=100, rep=500, return_mode="median")
    row = result_row(f"matmul_{kernel}", f"{m}x{n}x{k}", 2 * m * n * k * 1e-12, "tflops", times, t_torch)
    row["configs"] = picks
    row["gpu_us"] = gpu
    row["vs_triton_gpu"] = gpu["triton"] / gpu["blocktune"] if gpu.get("triton") else None
    print(f"  configs picked: {picks}", flush=True)
    print("  GPU kernel time (CUPTI): " + "  ".join(f"{n} {t:.1f} µs" for n, t in gpu.items())
          + (f"  ×triton {row['vs_triton_gpu']:.3f}" if row["vs_triton_gpu"] else "")
          + ("  — do_bench host-bound here (its times exceed the kernels' by over 15%): its ratio compares "
             "the host paths" if host_bound(times, gpu) else ""), flush=True)
    return row


def host_bound(times_ms: dict, gpu_us: dict) -> bool:
    """do_bench's time of some compiler above its kernel's own GPU time by more than 15%: the
    benchmark path's host work (a new C, three descriptors, the autotuner) outran the L2 flush."""
    return any(times_ms.get(n) and t == t and times_ms[n] * 1e3 > 1.15 * t for n, t in gpu_us.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4096³ and 8192³ only")
    ap.add_argument("--ws", action="store_true", help="also the warp-specialized descriptor_persistent kernel")
    ap.add_argument("--kernels", default=",".join(KERNELS), help=f"comma-separated, of {', '.join(KERNELS)}")
    a = ap.parse_args()
    kernels = [k for k in a.kernels.split(",") if k] + (["descriptor_persistent_ws"] if a.ws else [])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {tri.triton.__version__ if tri is not None else 'absent'}", flush=True)
    rows = [run(kern, m, n, k, sms) for kern in kernels for m, n, k in (QUICK if a.quick else SHAPES)]
    report(rows, "matmul_tma", "tflops", "matmul_tma.json")
    by_gpu = [r["vs_triton_gpu"] for r in rows if r.get("vs_triton_gpu") and r["vs_triton_gpu"] == r["vs_triton_gpu"]]
    if by_gpu:
        print(f"matmul_tma: by GPU kernel time (CUPTI, after the L2 flush) geomean × Triton {geomean(by_gpu):.3f}, "
              f"worst {min(by_gpu):.3f}; do_bench rows flagged host-bound compare host paths")


if __name__ == "__main__":
    main()
