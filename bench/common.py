"""Helpers shared by the benchmarks: load one kernel file under Triton and under blocktune."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
import tempfile
import types

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def load_as(filename: str, under: str) -> types.ModuleType:
    """The kernel file `bench/<filename>` (written for Triton) as a module under `under`:
    "triton" runs the text as it is; "blocktune" changes only its import lines."""
    path = HERE / filename
    text = path.read_text()
    if under == "blocktune":
        text = text.replace("import triton.language as tl", "import compiler.language as tl") \
                   .replace("import triton\n", "import compiler as triton\n") \
                   .replace("from triton.", "from compiler.")
    name = f"_bench_{path.stem}_{under}"
    if name in sys.modules:
        return sys.modules[name]
    # Triton and our jit read the source through inspect: keep a real file for each copy.
    out = pathlib.Path(tempfile.gettempdir()) / f"blocktune-kernels-{os.getpid()}" / f"{name}.py"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    spec = importlib.util.spec_from_file_location(name, out)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_twice(filename: str) -> tuple[types.ModuleType | None, types.ModuleType]:
    """(module under real Triton or None if Triton is missing, module under blocktune)."""
    tri = load_as(filename, "triton") if importlib.util.find_spec("triton") is not None else None
    return tri, load_as(filename, "blocktune")


def pin_group_size(spec: dict, group: int = 8) -> dict:
    """examples/specs/matmul.yaml with GROUP_SIZE_M fixed (a constant, as in the tutorial and in
    the recorded tuning and fleet tables) instead of searched: the 576-config space of those runs."""
    spec["space"].pop("GROUP_SIZE_M", None)
    spec["constants"] = {**spec.get("constants", {}), "GROUP_SIZE_M": group}
    for cfg in spec.get("configs") or []:
        cfg.pop("GROUP_SIZE_M", None)
    if spec.get("default_config"):
        spec["default_config"].pop("GROUP_SIZE_M", None)
    return spec


def geomean(xs):
    import math
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


_FLUSH: list = []   # do_bench's 256 MB L2 flush buffer, made at the first use


def gpu_kernel_us(fn, name_part: str, reps: int = 30, flush: bool = True) -> float:
    """Median GPU duration (µs) of the kernels `fn` launches whose name holds `name_part`, from the
    profiler's CUPTI trace (each call after do_bench's L2 flush unless `flush` is False): the
    kernel's own time, which no host cost enters (do_bench's events time the host's work between
    them whenever it outruns the flush). NaN when there is no trace (no CUPTI)."""
    import json
    import statistics

    import torch
    from torch.profiler import ProfilerActivity, profile
    if flush and not _FLUSH:
        _FLUSH.append(torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda"))
    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                if flush:
                    _FLUSH[0].zero_()
                fn()
            torch.cuda.synchronize()
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            prof.export_chrome_trace(f.name)
            with open(f.name) as trace_file:
                trace = json.load(trace_file)
    except Exception as exc:  # noqa: BLE001 - no CUPTI: the callers' other numbers still say something
        print(f"  (no CUPTI trace: {type(exc).__name__}: {exc})", flush=True)
        return float("nan")
    durs = [e["dur"] for e in trace.get("traceEvents", []) if e.get("cat") == "kernel" and name_part in e.get("name", "")]
    return statistics.median(durs[-reps:]) if durs else float("nan")


def report(rows: list[dict], kernel: str, unit: str, json_name: str) -> None:
    """Print rows (blocktune_<unit>, triton_<unit>, torch_<unit>, vs_triton, vs_torch) as a markdown
    table with the geomean ratio to Triton, and write them to $OUT/<json_name> when OUT is set."""
    import json
    label = {"gbs": "GB/s", "tflops": "TFLOP/s"}[unit]
    print(f"\n| kernel | shape | blocktune {label} | Triton {label} | torch {label} | × Triton | × torch |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kernel']} | {r['shape']} | {r[f'blocktune_{unit}']:.1f} | {r[f'triton_{unit}'] or 0:.1f} | "
              f"{r[f'torch_{unit}']:.1f} | {r['vs_triton'] or 0:.3f} | {r['vs_torch']:.3f} |")
    ratios = [r["vs_triton"] for r in rows if r["vs_triton"]]
    if ratios:
        print(f"{kernel}: geomean × Triton {geomean(ratios):.3f}, worst {min(ratios):.3f}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], json_name), "w") as f:
            json.dump(rows, f, indent=1)


def result_row(kernel: str, shape: str, work: float, unit: str, times: dict, t_torch: float) -> dict:
    """One benchmark row: `work` (GB or TFLOP) per ms of blocktune, Triton (None when absent) and
    torch, and the ratios; printed as it is made."""
    t_bt, t_tri = times["blocktune"], times["triton"]
    r = {"kernel": kernel, "shape": shape, "blocktune_ms": t_bt, "triton_ms": t_tri, "torch_ms": t_torch,
         f"blocktune_{unit}": work / (t_bt * 1e-3), f"triton_{unit}": work / (t_tri * 1e-3) if t_tri else None,
         f"torch_{unit}": work / (t_torch * 1e-3), "vs_triton": t_tri / t_bt if t_tri else None, "vs_torch": t_torch / t_bt}
    label = {"gbs": "GB/s", "tflops": "TFLOP/s"}[unit]
    print(f"{kernel} {shape}: blocktune {r[f'blocktune_{unit}']:7.1f} {label}  triton {r[f'triton_{unit}'] or 0:7.1f}  "
          f"torch {r[f'torch_{unit}']:7.1f}  ×triton {r['vs_triton'] or 0:.3f}  ×torch {r['vs_torch']:.3f}", flush=True)
    return r
