"""Tutorial kernels on the GPU: blocktune against Triton and torch, in the same run.

  vector add fp32 (2^28 elements); fused softmax fp32 (4096×1024, 4096×4096, 8192×8192, 32768×512);
  layer-norm forward fp16 (M=4096, N ∈ 1024, 2048, 4096, 8192).

Both compilers run the same kernel text (bench/tutorial_kernels.py) with the same configs; for each
shape every config of the list is timed and each framework's best is reported. Timing: Triton's
do_bench (CUDA events, L2 flush, median). Every output is checked against torch first.
Prints a table and writes JSON to $OUT/kernels.json when OUT is set.
"""
from __future__ import annotations

import json
import os
import sys

from common import geomean, load_twice

import torch

tri, bt = load_twice("tutorial_kernels.py")
import compiler  # noqa: E402

if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

DEV = "cuda"
ROWS: list[dict] = []


def bench(fn):
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def check(name, out, ref, atol, rtol):
    if not torch.allclose(out.float(), ref.float(), atol=atol, rtol=rtol):
        err = (out.double() - ref.double()).abs().max().item()
        raise AssertionError(f"{name}: wrong result (max abs error {err})")


def row(kind, shape, gbytes, t_bt, t_tri, t_torch):
    r = {"kernel": kind, "shape": shape,
         "blocktune_gbs": gbytes / (t_bt * 1e-3), "triton_gbs": gbytes / (t_tri * 1e-3) if t_tri else None,
         "torch_gbs": gbytes / (t_torch * 1e-3),
         "blocktune_ms": t_bt, "triton_ms": t_tri, "torch_ms": t_torch}
    r["vs_triton"] = t_tri / t_bt if t_tri else None
    r["vs_torch"] = t_torch / t_bt
    ROWS.append(r)
    print(f"{kind:10s} {shape:>12s}  blocktune {r['blocktune_gbs']:7.0f} GB/s  triton {r['triton_gbs'] or 0:7.0f}  "
          f"torch {r['torch_gbs']:7.0f}  ×triton {r['vs_triton'] or 0:.3f}", flush=True)


def vector_add():
    n = 1 << 28
    x = torch.rand(n, device=DEV)
    y = torch.rand(n, device=DEV)
    ref = x + y
    results = {}
    for name, mod in (("blocktune", bt), ("triton", tri)):
        if mod is None:
            results[name] = None
            continue
        out = torch.full_like(x, float("nan"))
        run = lambda: mod.add_kernel[(triton_cdiv(n, 1024),)](x, y, out, n, BLOCK_SIZE=1024)  # noqa: E731
        run()
        torch.cuda.synchronize()
        check(f"{name} add", out, ref, 0, 0)
        results[name] = bench(run)
    t_torch = bench(lambda: torch.add(x, y, out=ref))
    row("add", "2^28", 3 * n * 4 / 1e9, results["blocktune"], results["triton"], t_torch)


def triton_cdiv(a, b):
    return (a + b - 1) // b


def softmax(shapes):
    props = torch.cuda.get_device_properties(0)
    for m, n in shapes:
        x = torch.randn(m, n, device=DEV)
        ref = torch.softmax(x, dim=1)
        block = compiler.next_power_of_2(n)
        configs = [(w, g, s) for w in (4, 8, 16) for g in (m, props.multi_processor_count * 4) for s in (2,)]
        results = {}
        for name, mod in (("blocktune", bt), ("triton", tri)):
            if mod is None:
                results[name] = None
                continue
            best = None
            for warps, grid, stages in configs:
                y = torch.full_like(x, float("nan"))
                run = lambda: mod.softmax_kernel[(min(grid, m),)](y, x, x.stride(0), y.stride(0), m, n, BLOCK_SIZE=block,  # noqa: E731
                                                                  num_stages=stages, num_warps=warps)
                run()
                torch.cuda.synchronize()
                check(f"{name} softmax {m}x{n}", y, ref, 1e-6, 1e-4)
                t = bench(run)
                best = t if best is None or t < best else best
            results[name] = best
        t_torch = bench(lambda: torch.softmax(x, dim=1))
        row("softmax", f"{m}x{n}", 2 * m * n * 4 / 1e9, results["blocktune"], results["triton"], t_torch)


def layer_norm(ns, m=4096):
    for n in ns:
        x = torch.randn(m, n, device=DEV, dtype=torch.float16)
        w = torch.rand(n, device=DEV, dtype=torch.float16)
        b = torch.rand(n, device=DEV, dtype=torch.float16)
        eps = 1e-5
        ref = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float(), eps).half()
        # the tutorial's host-side choices
        max_fused = 65536 // x.element_size()
        block = min(max_fused, compiler.next_power_of_2(n))
        warps = min(max(block // 256, 1), 8)
        results = {}
        for name, mod in (("blocktune", bt), ("triton", tri)):
            if mod is None:
                results[name] = None
                continue
            y = torch.full_like(x, float("nan"))
            mean = torch.empty(m, device=DEV, dtype=torch.float32)
            rstd = torch.empty(m, device=DEV, dtype=torch.float32)
            run = lambda: mod._layer_norm_fwd_fused[(m,)](x, y, w, b, mean, rstd, x.stride(0), n, eps,  # noqa: E731
                                                          BLOCK_SIZE=block, num_warps=warps, num_ctas=1) \
                if name == "triton" else mod._layer_norm_fwd_fused[(m,)](x, y, w, b, mean, rstd, x.stride(0), n, eps,
                                                                          BLOCK_SIZE=block, num_warps=warps)
            run()
            torch.cuda.synchronize()
            check(f"{name} layer_norm {m}x{n}", y, ref, 1e-2, 1e-2)
            results[name] = bench(run)
        t_torch = bench(lambda: torch.nn.functional.layer_norm(x, (n,), w, b, eps))
        row("layer_norm", f"{m}x{n}", (2 * m * n * 2 + 2 * n * 2) / 1e9, results["blocktune"], results["triton"], t_torch)


def main():
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {getattr(sys.modules.get('triton'), '__version__', 'absent')}", flush=True)
    which = sys.argv[1:] or ["add", "softmax", "layer_norm"]
    if "add" in which:
        vector_add()
    if "softmax" in which:
        softmax([(4096, 1024), (4096, 4096), (8192, 8192), (32768, 512)])
    if "layer_norm" in which:
        layer_norm([1024, 2048, 4096, 8192])
    print("\n| kernel | shape | blocktune GB/s | Triton GB/s | torch GB/s | × Triton | × torch |")
    print("|---|---|---|---|---|---|---|")
    for r in ROWS:
        print(f"| {r['kernel']} | {r['shape']} | {r['blocktune_gbs']:.0f} | {r['triton_gbs'] or 0:.0f} | "
              f"{r['torch_gbs']:.0f} | {r['vs_triton'] or 0:.3f} | {r['vs_torch']:.3f} |")
    for kind in ("softmax", "layer_norm"):
        ratios = [r["vs_triton"] for r in ROWS if r["kernel"] == kind and r["vs_triton"]]
        if ratios:
            print(f"{kind}: geomean × Triton {geomean(ratios):.3f}, worst {min(ratios):.3f}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "kernels.json"), "w") as f:
            json.dump(ROWS, f, indent=1)


if __name__ == "__main__":
    main()
