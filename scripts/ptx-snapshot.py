#!/usr/bin/env python
"""The PTX of every test and benchmark kernel, one file per (kernel, specialization), without a GPU.

    scripts/ptx-snapshot.py OUT                   # every mode, each in a child process
    scripts/ptx-snapshot.py OUT --modes default,mma
    scripts/ptx-snapshot.py --record              # re-record what the tests compile and launch
    diff -r BEFORE AFTER                          # a refactoring must leave this empty

What is compiled, all for sm_90a:
  tests/    every specialization the compiler tests compile or launch (recorded by `--record`, which
            runs tests/compiler with a hook, into scripts/ptx-snapshot-kernels.json: kernel by module
            and name, signature, constexprs, num_warps, num_stages, divisibility, equal-to-1);
  ir/       the hand-built IR of tests/compiler/test_ptx.py (IR_CASES × num_warps 1/4/8, the type
            sweep, cache qualifiers);
  bench/    bench/tutorial_kernels.py as bench/kernels.py launches it (vector add 2^28, softmax at its
            four shapes × num_warps 4/8/16, layer norm at its four widths) and bench/matmul_kernels.py
            as bench/matmul.py launches it (16 configs × fp16/bf16 × the two specializations its shapes
            give: M = 1 and M divisible by 16), plus the pipeline depths 1–5 test_dot_mma.py uses.
Modes (environment of the child): default; mma (BLOCKTUNE_WGMMA=0, mma.sync); wgmma-sync
(BLOCKTUNE_WGMMA=sync); no-pipeline (BLOCKTUNE_NO_PIPELINE=1). The non-default modes compile only
the kernels that contain a `tl.dot`. `--modes` also takes NAME:VAR=VALUE,... for other switches.
A kernel that does not compile gives a `.error` file with the message instead of a `.ptx`.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "scripts" / "ptx-snapshot-kernels.json"
TARGET = "sm_90a"
MODES = {
    "default": {},
    "mma": {"BLOCKTUNE_WGMMA": "0"},
    "wgmma-sync": {"BLOCKTUNE_WGMMA": "sync"},
    "no-pipeline": {"BLOCKTUNE_NO_PIPELINE": "1"},
}


def _paths() -> None:
    # the repository first; tests/compiler for the test modules' own imports (as pytest does)
    for p in (ROOT, ROOT / "tests" / "compiler"):
        if str(p) not in sys.path:
            sys.path.append(str(p))
    if str(ROOT) in sys.path:
        sys.path.remove(str(ROOT))
    sys.path.insert(0, str(ROOT))


def bench_module(filename: str):
    """bench/<filename> under blocktune, loaded as bench/common.py loads it."""
    from tests.compiler.kernels import bench_kernels
    return bench_kernels(filename)


# ---- values in the manifest ------------------------------------------------------------------------

def encode(v):
    """JSON for a constexpr value; raises TypeError for what cannot be named again."""
    import compiler.language as tl
    if isinstance(v, tl.constexpr):
        v = v.value
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tl.dtype):
        return {"dtype": v.name}
    if isinstance(v, (tuple, list)):
        return {"tuple": [encode(x) for x in v]}
    ref = kernel_ref(v)
    if ref is not None:
        return {"jit": ref}
    raise TypeError(f"cannot record constexpr {v!r}")


def decode(v):
    import compiler.language as tl
    if isinstance(v, dict):
        if "dtype" in v:
            return tl.dtype(v["dtype"])
        if "tuple" in v:
            return tuple(decode(x) for x in v["tuple"])
        if "jit" in v:
            return resolve(v["jit"])
    return v


def kernel_ref(obj) -> str | None:
    """"module:qualname" of a @jit function defined at the top level of an importable module."""
    from compiler.runtime.jit import JITFunction
    if not isinstance(obj, JITFunction) or getattr(obj, "fn", None) is None:
        return None
    mod, qn = obj.fn.__module__, obj.fn.__qualname__
    if "<locals>" in qn or mod in ("__main__", "<submitted>"):
        return None
    return f"{mod}:{qn}"


def resolve(ref: str):
    mod, qn = ref.split(":")
    if mod.startswith("_bench_") and mod.endswith("_blocktune"):   # bench/common.py's copies
        m = bench_module(mod[len("_bench_"):-len("_blocktune")] + ".py")
    else:
        m = importlib.import_module(mod)
    obj = m
    for part in qn.split("."):
        obj = getattr(obj, part)
    return obj


# ---- recording (--record) --------------------------------------------------------------------------

class Recorder:
    """pytest plugin: every specialization compiled (compile.cache_key) or launched in interpret mode."""

    def __init__(self):
        self.specs: dict[str, dict] = {}
        self.skipped = 0

    def add(self, fn, sig, cx, nw, ns, div16, eq1, via):
        ref = kernel_ref(fn)
        try:
            if ref is None:
                raise TypeError("not a top-level kernel")
            spec = {"kernel": ref, "signature": dict(sig), "constexprs": {k: encode(v) for k, v in cx.items()},
                    "num_warps": int(nw), "num_stages": int(ns), "divisible_by_16": sorted(div16),
                    "equal_to_1": sorted(eq1), "dot": "dot(" in fn.src}
        except TypeError:
            self.skipped += 1
            return
        key = json.dumps(spec, sort_keys=True)
        self.specs.setdefault(key, dict(spec, via=via))

    def pytest_configure(self, config):
        from compiler.runtime import compile as C
        from compiler.runtime.jit import JITFunction
        rec = self
        orig_key = C.cache_key

        def cache_key(fn, signature, constexprs, num_warps, num_stages, target, divisible_by_16, equal_to_1):
            rec.add(fn, signature, constexprs, num_warps, num_stages, divisible_by_16, equal_to_1, "compile")
            return orig_key(fn, signature, constexprs, num_warps, num_stages, target, divisible_by_16, equal_to_1)
        C.cache_key = cache_key
        orig_run = JITFunction._run_interpreted

        def _run_interpreted(self, grid, values, num_warps, num_stages, warmup=False):
            try:
                specialize = getattr(self, "specialize", None) or self._specialize   # (named _specialize before issue 11)
                sig, cx, div16, eq1, _ = specialize(values, interpret=True)
                rec.add(self, sig, cx, num_warps, num_stages, div16, eq1, "interpret")
            except Exception:  # noqa: BLE001 - the launch itself reports it
                pass
            return orig_run(self, grid, values, num_warps, num_stages, warmup)
        JITFunction._run_interpreted = _run_interpreted


def record() -> None:
    import pytest
    rec = Recorder()
    os.chdir(ROOT)
    pytest.main(["-q", "-p", "no:cacheprovider", "-x", "--timeout=900", "tests/compiler"], plugins=[rec])
    specs = sorted(rec.specs.values(), key=lambda s: json.dumps(s, sort_keys=True))
    MANIFEST.write_text(json.dumps(specs, indent=0, sort_keys=True) + "\n")
    print(f"recorded {len(specs)} specializations ({rec.skipped} launches of local or submitted kernels left out) "
          f"in {MANIFEST.relative_to(ROOT)}")


# ---- the jobs --------------------------------------------------------------------------------------

def _label(name: str, spec) -> str:
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{name}-{digest}"


def compile_job(kernel, sig, cx, nw, ns, div16, eq1):
    import compiler
    return lambda: compiler.compile(kernel, signature=sig, constexprs=cx, num_warps=nw, num_stages=ns, target=TARGET,
                                    divisible_by_16=tuple(div16), equal_to_1=tuple(eq1)).asm["ptx"]


def test_jobs():
    for spec in json.loads(MANIFEST.read_text()):
        s = {k: v for k, v in spec.items() if k != "via"}
        name = spec["kernel"].replace(":", ".")

        def run(spec=spec):
            cx = {k: decode(v) for k, v in spec["constexprs"].items()}
            return compile_job(resolve(spec["kernel"]), spec["signature"], cx, spec["num_warps"], spec["num_stages"],
                               spec["divisible_by_16"], spec["equal_to_1"])()
        yield "tests", _label(name, s), spec["dot"], run, s


def ir_jobs():
    import ir_builders as B
    import test_ptx as T
    from compiler.backend import nvptx

    def ir(build, nw):
        return lambda: nvptx.compile_ir(build(), num_warps=nw, target=TARGET)["ptx"]
    for name in sorted(T.IR_CASES):
        for nw in (1, 4, 8):
            yield "ir", f"{name}-w{nw}", name.startswith("matmul"), ir(T.IR_CASES[name], nw), {"nw": nw}
    for dt in ("fp16", "bf16", "fp32", "fp64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "i1"):
        yield "ir", f"type_sweep-{dt}", False, (lambda dt=dt: T._type_sweep(dt)["ptx"]), {}
    for cache in ("", ".cg", ".ca", ".cs"):
        for ev in ("", "evict_first", "evict_last"):
            for masked in (False, True):
                def build(cache=cache, ev=ev, masked=masked):
                    k = B.K("ev", ("X", "Y", "n"), X="*fp32", Y="*fp32", n="i32")
                    offs = k.arange(512)
                    m = k.cmp("lt", offs, k["n"]) if masked else None
                    x = k.op("load", [k.addptr(k["X"], offs), m, None], B.bt(B.T.float32, (512,)), cache=cache,
                             eviction=ev, volatile=False)
                    k.op("store", [k.addptr(k["Y"], offs), x, m], None, cache=".cs" if cache == ".cs" else "", eviction=ev)
                    k.ret()
                    return k.fn()
                yield "ir", f"cache{cache or '-none'}-{ev or 'none'}-{'masked' if masked else 'plain'}", False, ir(build, 4), {}


def bench_jobs():
    import compiler
    tut = bench_module("tutorial_kernels.py")
    mm = bench_module("matmul_kernels.py")
    p32, p16 = "*fp32", "*fp16"
    n = 1 << 28
    yield ("bench", "add-2^28", False,
           compile_job(tut.add_kernel, dict(x_ptr=p32, y_ptr=p32, output_ptr=p32, n_elements="i32"), {"BLOCK_SIZE": 1024},
                       4, 3, ("x_ptr", "y_ptr", "output_ptr", "n_elements"), ()), {})
    del n
    sm_sig = dict(output_ptr=p32, input_ptr=p32, input_row_stride="i32", output_row_stride="i32", n_rows="i32", n_cols="i32")
    for m, ncols in ((4096, 1024), (4096, 4096), (8192, 8192), (32768, 512)):
        for w in (4, 8, 16):
            cx = {"BLOCK_SIZE": compiler.next_power_of_2(ncols), "num_stages": 2}
            yield ("bench", f"softmax-{m}x{ncols}-w{w}", False,
                   compile_job(tut.softmax_kernel, sm_sig, cx, w, 2, tuple(sm_sig), ()), {})
    ln_sig = dict(X=p16, Y=p16, W=p16, B=p16, Mean=p32, Rstd=p32, stride="i32", N="i32", eps="fp32")
    for ncols in (1024, 2048, 4096, 8192):
        block = min(65536 // 2, compiler.next_power_of_2(ncols))
        warps = min(max(block // 256, 1), 8)
        yield ("bench", f"layer_norm-{ncols}", False,
               compile_job(tut._layer_norm_fwd_fused, ln_sig, {"BLOCK_SIZE": block}, warps, 3,
                           ("X", "Y", "W", "B", "Mean", "Rstd", "stride", "N"), ()), {})
    names = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm",
             "stride_cn")
    ones = ("stride_ak", "stride_bn", "stride_cn")
    for dt in ("fp16", "bf16"):
        sig = dict.fromkeys(names, "i32") | {"a_ptr": f"*{dt}", "b_ptr": f"*{dt}", "c_ptr": "*fp16"}
        for mname, div, eq1 in (("M16", [x for x in names if x not in ones], ones),
                                ("M1", [x for x in names if x not in ones + ("M",)], ones + ("M",))):
            for i, cfg in enumerate(mm.get_autotune_config()):
                for act in ("", "leaky_relu"):
                    cx = dict(cfg.kwargs, ACTIVATION=act)
                    yield ("bench", f"matmul-{dt}-{mname}-cfg{i:02d}{'-leaky' if act else ''}", True,
                           compile_job(mm.matmul_kernel.fn, sig, cx, cfg.num_warps, cfg.num_stages, div, eq1), {})
    sig = dict.fromkeys(names, "i32") | {"a_ptr": p16, "b_ptr": p16, "c_ptr": p16}
    div = [x for x in names if x not in ones]
    for stages in (1, 2, 3, 4, 5):
        cx = dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION="")
        yield ("bench", f"matmul-128x128x32-w4-s{stages}", True, compile_job(mm.matmul_kernel.fn, sig, cx, 4, stages, div, ones), {})


def run_mode(out: Path, mode: str) -> None:
    _paths()
    os.environ["BLOCKTUNE_DISABLE_DISK_CACHE"] = "1"
    only_dot = mode != "default"
    index = {}
    counts = {"ptx": 0, "error": 0}
    for group, label, dot, job, spec in [*test_jobs(), *ir_jobs(), *bench_jobs()]:
        if only_dot and not dot:
            continue
        d = out / mode / group
        d.mkdir(parents=True, exist_ok=True)
        if f"{group}/{label}" in index:
            raise SystemExit(f"duplicate label {group}/{label}")
        index[f"{group}/{label}"] = spec
        try:
            ptx = job()
        except Exception as exc:  # noqa: BLE001 - recorded, compared like the PTX
            (d / f"{label}.error").write_text(f"{type(exc).__name__}: {exc}\n")
            counts["error"] += 1
            continue
        (d / f"{label}.ptx").write_text(ptx)
        counts["ptx"] += 1
    (out / mode / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True, default=str) + "\n")
    print(f"{mode}: {counts['ptx']} PTX files, {counts['error']} compile errors", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", type=Path)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: names of MODES or NAME:VAR=VAL;VAR=VAL")
    ap.add_argument("--record", action="store_true", help="re-record the specializations the compiler tests use")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.record:
        _paths()
        record()
        return
    if args.out is None:
        ap.error("OUT is required")
    if args.child:
        run_mode(args.out, args.child)
        return
    for item in args.modes.split(","):
        name, _, extra = item.partition(":")
        env = dict(MODES.get(name, {}))
        for kv in filter(None, extra.split(";")):
            k, _, v = kv.partition("=")
            env[k] = v
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("BLOCKTUNE_")}
        # PYTHONHASHSEED: libdevice definitions are gathered in set order (llvm_target._libdevice_defs),
        # so the fp64 math kernels' register numbering depends on the hash seed
        # TRITON_DISABLE_LINE_INFO: the snapshot is the code; .loc lines would follow every edit of
        # a kernel's file (set TRITON_DISABLE_LINE_INFO=0 in a mode to see them)
        child_env.setdefault("TRITON_DISABLE_LINE_INFO", "1")
        child_env.update(env, BLOCKTUNE_CACHE_DIR=tempfile.mkdtemp(prefix="ptx-snapshot-"), PYTHONHASHSEED="0",
                         PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        r = subprocess.run([sys.executable, __file__, str(args.out), "--child", name], env=child_env)
        if r.returncode:
            raise SystemExit(f"mode {name} failed (exit {r.returncode})")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        traceback.print_exc()
        raise SystemExit(130)
