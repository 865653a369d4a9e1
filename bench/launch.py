"""Host launch overhead and compile time: blocktune vs Triton vs torch, in the same process.

    python bench/launch.py            (on a GPU machine; Triton is optional)

1. Launch overhead: µs of host time per `kernel[grid](x, y, out, n, BLOCK_SIZE=1024)` of a
   one-block vector add (and `torch.add(x, y, out=out)`), measured over N back-to-back launches
   in batches of 256 with a synchronize between batches outside the timed region (only the
   host's enqueueing is timed, not the GPU's throughput for tiny kernels; the rows are measured
   in turn, repeat after repeat, and each reports its median). Both a
   tuple grid and a callable grid (`lambda meta: (cdiv(n, meta["BLOCK_SIZE"]),)`).
   On sm_90 also tutorial 03's matmul, whose tiles load through tensor maps the launch builds:
   with the maps cached, and with A at a new address every launch (a map encoded per launch).
2. First compile of a new vector-add specialization in a warm process (front end, backend and
   LLVM already imported/initialized; disk cache off): front end, backend, end to end
   `kernel.warmup`, and the first launch (+ module load).
3. Module load: `cuModuleLoadData` on the PTX (driver JIT) vs ptxas ahead of time + loading the
   cubin.

Prints a table; writes JSON to $OUT/launch.json when OUT is set.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import load_as, load_twice  # noqa: E402

os.environ.setdefault("BLOCKTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="blocktune-bench-"))

import torch  # noqa: E402

import compiler  # noqa: E402
from compiler.runtime import compile as C  # noqa: E402
from compiler.runtime import driver  # noqa: E402

RESULTS: dict = {}
N_LAUNCH = 20000


def _batch_us(fn, n: int, batch: int) -> float:
    total = 0.0
    done = 0
    while done < n:
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        total += time.perf_counter() - t0
        torch.cuda.synchronize()
        done += batch
    return total / done * 1e6


def host_us_rows(rows: list, n=N_LAUNCH, repeats=7, batch=256) -> list[tuple[str, float]]:
    """Median over `repeats` of the mean host µs per call of each `(name, fn, n_or_None)` row.

    Only the enqueueing is timed: launches go in batches of `batch` (well under the driver's queue
    depth) with a synchronize between batches outside the timed region. Timing N back-to-back
    launches in one go would measure the GPU's throughput for tiny kernels once the queue fills.
    Every repeat goes through all the rows in turn, so that a host whose speed drifts (clocks,
    neighbours) moves all rows alike instead of whichever was measured at the time.
    """
    for _, fn, _n in rows:
        for _ in range(1000):
            fn()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    for _ in range(repeats):
        for name, fn, rn in rows:
            samples[name].append(_batch_us(fn, rn or n, batch))
    return [(name, statistics.median(samples[name])) for name, _, _ in rows]


def matmul_map_launches() -> None:
    """Tutorial 03's matmul on sm_90 loads its tiles through TMA from tensor maps the launch builds
    (compiler/runtime/pointer_maps.py): host µs per launch with the maps cached, and with A at an
    address the cache has not seen on every launch (one cuTensorMapEncodeTiled per launch: more
    views than the cache keeps, taken in turn)."""
    from compiler.runtime import pointer_maps
    mm = load_as("matmul_kernels.py", "blocktune")
    m = n = k = 64
    views = pointer_maps._CACHE_LIMIT + 904
    buf = torch.randn(m * k + 8 * views, device="cuda", dtype=torch.float16)
    a_views = [buf[8 * i:8 * i + m * k].view(m, k) for i in range(views)]   # 16-byte steps: each a new map
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    cfg = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, ACTIVATION="", num_warps=4,
               num_stages=3)
    kern = mm.matmul_kernel.fn

    def launch(a):
        kern[(1,)](a, b, c, m, n, k, k, 1, n, 1, n, 1, **cfg)
    launch(a_views[0])
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), a_views[0].float() @ b.float(), rtol=2e-2, atol=2e-2)
    maps = len(pointer_maps._cache)
    turn = iter(range(1 << 62))
    rows = host_us_rows([("maps cached", lambda: launch(a_views[0]), 5000),
                         ("a new A address each launch", lambda: launch(a_views[next(turn) % views]), 5000)])
    print(f"\nhost time per launch, tutorial 03's matmul 64³ (64x64x64 w4 s3), its tiles through TMA "
          f"({maps} tensor maps after the first launch)")
    for name, us in rows:
        print(f"  {name:34s} {us:7.2f} us")
    RESULTS["matmul_pointer_maps_launch_us"] = {name: round(us, 3) for name, us in rows}


def main():
    tri, bt = load_twice("tutorial_kernels.py")     # tutorial 01's add_kernel, as the other benchmarks
    props = driver.device_properties(0)
    print(f"device: {props['name']} ({'sm_%d%d' % props['capability']}), driver {props['driver_version']}, "
          f"CUDA {props['cuda_version']}; torch {torch.__version__}; "
          f"triton {__import__('triton').__version__ if tri is not None else 'not installed'}")

    n = 1024
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    cdiv = compiler.cdiv

    # correctness first
    bt.add_kernel[(1,)](x, y, out, n, BLOCK_SIZE=1024)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)

    rows = []
    k = bt.add_kernel
    rows.append(("blocktune, tuple grid", lambda: k[(1,)](x, y, out, n, BLOCK_SIZE=1024), None))
    rows.append(("blocktune, callable grid",
                 lambda: k[lambda m: (cdiv(m["n_elements"], m["BLOCK_SIZE"]),)](x, y, out, n, BLOCK_SIZE=1024), None))
    if tri is not None:
        import triton
        tk = tri.add_kernel
        tk[(1,)](x, y, out, n, BLOCK_SIZE=1024)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x + y)
        rows.append(("triton, tuple grid", lambda: tk[(1,)](x, y, out, n, BLOCK_SIZE=1024), None))
        rows.append(("triton, callable grid",
                     lambda: tk[lambda m: (triton.cdiv(m["n_elements"], m["BLOCK_SIZE"]),)](
                         x, y, out, n, BLOCK_SIZE=1024), None))
    rows.append(("torch.add(out=)", lambda: torch.add(x, y, out=out), None))
    # the public CompiledKernel.launch (checked, slower) for reference
    ck = compiler.compile(bt.add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": "i32"},
                          {"BLOCK_SIZE": 1024}, divisible_by_16=("x_ptr", "y_ptr", "output_ptr", "n_elements"))
    stream = torch.cuda.current_stream().cuda_stream
    rows.append(("blocktune CompiledKernel.launch", lambda: ck.launch((1, 1, 1), [x, y, out, n], stream), 5000))
    # the floor under the fast path: the launcher alone (pack + cuLaunchKernel), native (launch.c,
    # what the fast path uses when a C compiler is there) and ctypes (the fallback)
    from compiler.runtime import launcher as L, native
    raw = ck.make_launcher(torch.cuda.current_device(), ck.metadata["passed"])
    xp, yp, op = x.data_ptr(), y.data_ptr(), out.data_ptr()
    kind = "native" if native.module() is not None else "ctypes (no C compiler)"
    rows.append((f"  launcher only, {kind}", lambda: raw(1, 1, 1, stream, xp, yp, op, n), None))
    lf = ck.load(torch.cuda.current_device())
    m = ck.metadata
    passed = {p: m["arg_types"][m["arg_names"].index(p)] for p in m["passed"]}
    raw_ct = L.make_ctypes_launcher(lf, list(m["passed"]), passed, m.get("launch_warps", m["num_warps"]), m.get("shared", 0), ck.name)
    rows.append(("  launcher only, ctypes", lambda: raw_ct(1, 1, 1, stream, xp, yp, op, n), None))
    rows = host_us_rows(rows)
    print("\nhost time per launch (one-block vector add, no sync between launches)")
    for name, us in rows:
        print(f"  {name:34s} {us:7.2f} us")
    RESULTS["launch_us"] = {name: round(us, 3) for name, us in rows}
    if props["capability"] == (9, 0):
        matmul_map_launches()

    # -- first compile in a warm process ---------------------------------------------------------
    os.environ["BLOCKTUNE_DISABLE_DISK_CACHE"] = "1"
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": "i32"}
    div = ("x_ptr", "y_ptr", "output_ptr", "n_elements")
    target = driver.target_for_device(0)
    from compiler.backend.nvptx import compile_ir
    t = {}
    samples = {"frontend": [], "backend": [], "compile": [], "warmup": [], "first_launch": [], "load_ptx": []}
    for i, block in enumerate((128, 256, 512, 2048, 4096)):
        t0 = time.perf_counter()
        ir_fn = C.build_ir(bt.add_kernel, sig, {"BLOCK_SIZE": block}, div, ())
        t1 = time.perf_counter()
        out_b = compile_ir(ir_fn, num_warps=4, num_stages=3, target=target)
        t2 = time.perf_counter()
        samples["frontend"].append((t1 - t0) * 1e3)
        samples["backend"].append((t2 - t1) * 1e3)
        t0 = time.perf_counter()
        ck = compiler.compile(bt.add_kernel, sig, {"BLOCK_SIZE": block}, num_warps=8, divisible_by_16=div)
        samples["compile"].append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        ck.load(0)
        samples["load_ptx"].append((time.perf_counter() - t0) * 1e3)
        fresh = compiler.runtime.jit.JITFunction(bt.add_kernel.fn)
        t0 = time.perf_counter()
        fresh.warmup(x, y, out, n, BLOCK_SIZE=block, num_warps=2, grid=(1,))
        samples["warmup"].append((time.perf_counter() - t0) * 1e3)
        fresh2 = compiler.runtime.jit.JITFunction(bt.add_kernel.fn)
        t0 = time.perf_counter()
        fresh2[(1,)](x, y, out, n, BLOCK_SIZE=block, num_warps=1)
        torch.cuda.synchronize()
        samples["first_launch"].append((time.perf_counter() - t0) * 1e3)
        _ = out_b
    for key, vals in samples.items():
        t[key] = statistics.median(vals)
    print("\nfirst compile of a new vector-add specialization, warm process, disk cache off (median of 5, ms)")
    print(f"  front end (AST → block IR)         {t['frontend']:7.2f}")
    print(f"  backend (IR → LLVM → PTX)          {t['backend']:7.2f}")
    print(f"  compiler.compile end to end        {t['compile']:7.2f}")
    print(f"  kernel.warmup (key + compile)      {t['warmup']:7.2f}")
    print(f"  module load (PTX, driver JIT)      {t['load_ptx']:7.2f}")
    print(f"  first launch end to end (+load)    {t['first_launch']:7.2f}")
    RESULTS["first_compile_ms"] = {k: round(v, 3) for k, v in t.items()}
    if tri is not None:
        import triton
        vals = []
        for block in (128, 256, 512, 2048, 4096):
            kk = triton.jit(tri.add_kernel.fn)
            t0 = time.perf_counter()
            kk[(1,)](x, y, out, n, BLOCK_SIZE=block, num_warps=1)
            torch.cuda.synchronize()
            vals.append((time.perf_counter() - t0) * 1e3)
        print(f"  triton first launch (its cache on) {statistics.median(vals):7.2f}")
        RESULTS["first_compile_ms"]["triton_first_launch"] = round(statistics.median(vals), 3)

    # -- module load: PTX vs cubin -----------------------------------------------------------------
    from compiler import ptxas

    exe = ptxas.for_driver(driver.device_properties(0).get("cuda_version"))   # one whose cubins load here
    if exe:
        ptx_ms, ptxas_ms, cubin_ms = [], [], []
        for block in (64, 128, 256, 512, 1024):
            ck = compiler.compile(bt.add_kernel, sig, {"BLOCK_SIZE": block}, num_warps=4, divisible_by_16=div)
            t0 = time.perf_counter()
            driver.load_module(ck.asm["ptx"], ck.name, 0, 0)
            ptx_ms.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            cubin = ptxas.assemble(ck.asm["ptx"], ck.metadata["target"], exe=exe)
            ptxas_ms.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            driver.load_module(cubin, ck.name, 0, 0)
            cubin_ms.append((time.perf_counter() - t0) * 1e3)
        print("\nmodule load (median of 5, ms): "
              f"PTX via driver JIT {statistics.median(ptx_ms):.2f}; ptxas {statistics.median(ptxas_ms):.2f} + "
              f"cubin load {statistics.median(cubin_ms):.2f}")
        print("  (the driver also caches JIT results in ~/.nv/ComputeCache; a cubin from the disk cache "
              "skips both: BLOCKTUNE_PTXAS_AOT=1)")
        RESULTS["module_load_ms"] = {"ptx_driver_jit": statistics.median(ptx_ms),
                                     "ptxas": statistics.median(ptxas_ms), "cubin": statistics.median(cubin_ms)}
    else:
        print("\nmodule load: no ptxas whose cubins this driver loads, PTX path only")

    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "launch.json"), "w") as f:
            json.dump(RESULTS, f, indent=2)


if __name__ == "__main__":
    main()
