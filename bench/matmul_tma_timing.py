"""Where tutorial 09's per-tile host-descriptor matmul (`matmul_kernel_tma`) loses its time: on the
GPU or on the host. blocktune and Triton run the same kernel text (bench/persistent_matmul_kernels.py)
at the same fixed configs (no autotuner search), and each (shape, config, compiler) gets:

  gpu      the kernel's own duration on the GPU from CUPTI (torch.profiler's trace), after an L2
           flush as do_bench does, median of 30 — host time cannot enter it;
  gpu-warm the same without the flush (back-to-back launches);
  bench    do_bench (CUDA events, L2 flush, median) of what bench/matmul_tma.py times: a new C, three
           `TensorDescriptor.from_tensor` and the launch through the autotuner (one config, so it
           does not search) — the number the 16:45 table reports;
  launch   do_bench of the bare launch with descriptors made once;
  host     host µs per call of that bench path and of the bare launch (batches without a
           synchronize: the enqueueing only).
A `gpu` close to Triton's with a `bench` far from it says the time is the host's (do_bench's
events then time the host's work between them once it outruns the GPU's flush); a `gpu` far from
Triton's says it is the kernel's. `matmul_kernel_tma_persistent` (host descriptors too; and
`--kernels ...,descriptor_persistent`, descriptors made in the kernel) give the same columns for
contrast. Two rows undo one difference between the two compilers each, to tell which one costs:
`blocktune/carveout-default` takes back the largest shared-memory carveout that blocktune's loader
now asks for above 48 KB as Triton's does (driver.prefer_shared_memory; without it the driver may
size the SM's shared memory for one 99 KB program where two fit), and `blocktune/l2-128` encodes
the host tensor maps with Triton's L2 promotion (128 B instead of blocktune's 256 B;
compiler/runtime/tensor_maps.py), the one field in which the two compilers' maps differ.

    python bench/matmul_tma_timing.py [--shapes 4096x4096x512,1024x1024x1024]
                                      [--configs 128x128x64w4s3,128x128x128w4s3] [--kernels tma,tma_persistent]

About a minute on an H100 (a third of it compiling). Writes $OUT/matmul_tma_timing.json when OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("BLOCKTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="blocktune-matmul-tma-timing-"))

from common import gpu_kernel_us, load_twice  # noqa: E402

import torch  # noqa: E402

tri, bt = load_twice("persistent_matmul_kernels.py")
if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

def parse_shape(s: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in s.lower().split("x"))
    return m, n, k


def parse_config(s: str) -> tuple[int, int, int, int, int]:
    import re
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)w(\d+)s(\d+)", s)
    if m is None:
        raise SystemExit(f"bad config {s!r} (expected e.g. 128x128x64w4s3)")
    return tuple(int(x) for x in m.groups())


def launchers(mod, kernel: str, a, b, cfg, sms: int):
    """(bare launch with descriptors made once, the benchmark's path: new C + descriptors + the
    autotuner with this one config, C of the bare launch)."""
    bm, bn, bk, w, s = cfg
    M, K = a.shape
    N = b.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    tiles = triton_cdiv(M, bm) * triton_cdiv(N, bn)
    meta = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, num_warps=w, num_stages=s)
    config = mod.triton.Config({k: meta[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")},
                               num_warps=w, num_stages=s, pre_hook=mod.set_block_shapes if kernel != "descriptor_persistent" else None)
    if kernel == "descriptor_persistent":
        mod.triton.set_allocator(mod.alloc_fn)
        grid = (min(sms, tiles),)
        fn = mod.matmul_kernel_descriptor_persistent

        def launch():
            fn[grid](a, b, c, M, N, K, EPILOGUE_SUBTILE=False, NUM_SMS=sms, WARP_SPECIALIZE=False, **meta)
        tuned = mod.autotuned(fn, [config], ("M", "N", "K", "WARP_SPECIALIZE"))
        return launch, (lambda: mod.matmul_descriptor_persistent_tuned(tuned, a, b, sms)), c
    descs = (mod.TensorDescriptor.from_tensor(a, [bm, bk]), mod.TensorDescriptor.from_tensor(b, [bn, bk]),
             mod.TensorDescriptor.from_tensor(c, [bm, bn]))
    if kernel == "tma":
        fn, grid, extra = mod.matmul_kernel_tma, (tiles,), {}
        tuned = mod.autotuned(fn, [config])
        path = lambda: mod.matmul_tma(tuned, a, b)  # noqa: E731
    else:
        fn, grid, extra = mod.matmul_kernel_tma_persistent, (min(sms, tiles),), {"NUM_SMS": sms}
        tuned = mod.autotuned(fn, [config])
        path = lambda: mod.matmul_tma_persistent(tuned, a, b, sms)  # noqa: E731

    def launch():
        fn[grid](*descs, M, N, K, **extra, **meta)
    return launch, path, c


def triton_cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


def host_us(fn, n: int = 200, batch: int = 50) -> float:
    """Median host µs per call over batches (synchronized between batches, outside the timing)."""
    samples = []
    for _ in range(n // batch):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def measure(mod, kernel, a, b, ref, cfg, sms, setting: dict) -> dict:
    launch, path, c = launchers(mod, kernel, a, b, cfg, sms)
    if "promotion" in setting:
        set_promotion(setting["promotion"])
    c.fill_(float("nan"))
    launch()
    if "carveout" in setting:   # the kernel is loaded now
        set_carveout(kernel_of(mod, kernel), setting["carveout"])
    out = path()
    torch.cuda.synchronize()
    for name, res in (("launch", c), ("bench path", out)):
        err = ((res.double() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            raise AssertionError(f"{kernel} {cfg} ({name}): relative error {err:.3e}")
    return {
        "gpu": gpu_kernel_us(launch, "matmul_kernel"),
        "gpu-warm": gpu_kernel_us(launch, "matmul_kernel", flush=False),
        "bench": do_bench(path, warmup=20, rep=60, return_mode="median") * 1e3,
        "launch": do_bench(launch, warmup=20, rep=60, return_mode="median") * 1e3,
        "host bench path": host_us(path),
        "host launch": host_us(launch),
    }


def set_promotion(member: str) -> None:
    """Encode blocktune's host tensor maps with this L2 promotion from now on (maps cached under
    the other one are dropped)."""
    from compiler.runtime import tensor_maps
    tensor_maps.L2_PROMOTION = member
    tensor_maps._cache.clear()


def kernel_of(mod, kernel: str):
    return {"tma": mod.matmul_kernel_tma, "tma_persistent": mod.matmul_kernel_tma_persistent,
            "descriptor_persistent": mod.matmul_kernel_descriptor_persistent}[kernel]


def set_carveout(jit_fn, prefer_shared: bool) -> None:
    """Give every loaded specialization of blocktune's `jit_fn` the largest shared-memory carveout
    preference (its loader's default above 48 KB) or none (the driver's own choice)."""
    from compiler.runtime import driver
    for kernels, *_ in jit_fn.device_caches.values():
        for ck in kernels.values():
            if ck.metadata.get("shared", 0) > 48 * 1024:
                driver.prefer_shared_memory(ck.load().function, prefer_shared)


COLUMNS = ("gpu", "gpu-warm", "bench", "launch", "host bench path", "host launch")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="4096x4096x512,1024x1024x1024")
    ap.add_argument("--configs", default="128x128x64w4s3,128x128x128w4s3")
    ap.add_argument("--kernels", default="tma,tma_persistent", help="of tma, tma_persistent, descriptor_persistent")
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {tri.triton.__version__ if tri is not None else 'absent'}; all times µs", flush=True)
    rows = []
    head = f"{'kernel':<22} {'shape':<15} {'config':<16} {'compiler':<16} " + " ".join(f"{c:>15}" for c in COLUMNS)
    print(head)
    for shape in args.shapes.split(","):
        m, n, k = parse_shape(shape)
        a = torch.randn((m, k), device="cuda", dtype=torch.float16)
        b = torch.randn((n, k), device="cuda", dtype=torch.float16)
        ref = a.double() @ b.double().T
        for kernel in args.kernels.split(","):
            for cfg_s in args.configs.split(","):
                cfg = parse_config(cfg_s)
                variants = [("blocktune", bt, dict(promotion="L2_256B", carveout=True)), ("triton", tri, {})]
                if kernel == "tma":
                    variants[1:1] = [("blocktune/carveout-default", bt, dict(promotion="L2_256B", carveout=False)),
                                     ("blocktune/l2-128", bt, dict(promotion="L2_128B", carveout=True))]
                for name, mod, setting in variants:
                    if mod is None:
                        continue
                    try:
                        r = measure(mod, kernel, a, b, ref, cfg, sms, setting)
                    except Exception as exc:  # noqa: BLE001 - one failing cell must not hide the others
                        print(f"{kernel:<22} {shape:<15} {cfg_s:<16} {name:<16} failed: {type(exc).__name__}: {exc}"[:300],
                              flush=True)
                        continue
                    tflops = 2 * m * n * k / (r["gpu"] * 1e-6) / 1e12
                    rows.append({"kernel": kernel, "shape": shape, "config": cfg_s, "compiler": name,
                                 "gpu_tflops": tflops, **r})
                    print(f"{kernel:<22} {shape:<15} {cfg_s:<16} {name:<16} "
                          + " ".join(f"{r[c]:15.1f}" for c in COLUMNS) + f"   ({tflops:.0f} TFLOP/s on the GPU)",
                          flush=True)
    print()
    print("| kernel | shape | config | compiler | " + " | ".join(COLUMNS) + " | GPU TFLOP/s |")
    print("|---|---|---|---|" + "---|" * (len(COLUMNS) + 1))
    for r in rows:
        print(f"| {r['kernel']} | {r['shape']} | {r['config']} | {r['compiler']} | "
              + " | ".join(f"{r[c]:.1f}" for c in COLUMNS) + f" | {r['gpu_tflops']:.0f} |")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "matmul_tma_timing.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
