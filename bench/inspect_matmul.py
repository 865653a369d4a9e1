"""Tutorial 03's matmul under Triton and blocktune for fixed configs: PTX, `ptxas -v` and the time
of each, side by side (the autotuner left out, so both run exactly the same config).

    python3 bench/inspect_matmul.py [--size 4096] [--configs 128x256x64w8s3,128x128x64w4s4]

Writes $OUT/matmul-<cfg>-{triton,blocktune}.ptx (and the ptxas reports) and prints TFLOP/s.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile

from common import load_twice

import torch

OUT = os.environ.get("OUT", "/tmp/inspect-matmul")


def ptxas_report(ptx: str) -> str:
    from compiler import ptxas
    arch = re.search(r"^\.target\s+(\w+)", ptx, re.M).group(1)
    try:
        return ptxas.report(ptx, arch)
    except Exception as exc:  # noqa: BLE001 - a report, not a check
        return f"ptxas failed: {exc}"


def parse(cfg: str) -> tuple[int, int, int, int, int]:
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)w(\d+)s(\d+)", cfg)
    if m is None:
        raise SystemExit(f"bad config {cfg!r} (expected e.g. 128x256x64w8s3)")
    return tuple(int(x) for x in m.groups())


def run(mod, a, b, c, bm, bn, bk, w, s):
    M, K = a.shape
    N = b.shape[1]
    kernel = mod.matmul_kernel.fn     # the @jit function under the tutorial's @autotune
    grid = (((M + bm - 1) // bm) * ((N + bn - 1) // bn),)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    kw = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION="",
              num_warps=w, num_stages=s)
    ck = kernel[grid](*args, **kw)
    return ck, (lambda: kernel[grid](*args, **kw))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--configs", default="128x256x64w8s3,128x128x64w4s4,128x256x128w8s3")
    args = p.parse_args()
    os.makedirs(OUT, exist_ok=True)
    tri, bt = load_twice("matmul_kernels.py")
    from triton.testing import do_bench
    n = args.size
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    ref = (a.double() @ b.double())
    flops = 2 * n ** 3
    for cfg in args.configs.split(","):
        bm, bn, bk, w, s = parse(cfg)
        line = [f"{cfg:18s}"]
        for name, mod in (("triton", tri), ("blocktune", bt)):
            if mod is None:
                continue
            c = torch.full((n, n), float("nan"), device="cuda", dtype=torch.float16)
            try:
                ck, go = run(mod, a, b, c, bm, bn, bk, w, s)
            except Exception as exc:  # noqa: BLE001
                line.append(f"{name}: {type(exc).__name__}: {str(exc)[:60]}")
                continue
            torch.cuda.synchronize()
            err = ((c.double() - ref).norm() / ref.norm()).item()
            ms = do_bench(go, warmup=100, rep=500)
            ptx = ck.asm["ptx"]
            with open(os.path.join(OUT, f"matmul-{cfg}-{name}.ptx"), "w") as f:
                f.write(ptx)
            rep = ptxas_report(ptx)
            with open(os.path.join(OUT, f"matmul-{cfg}-{name}.ptxas.txt"), "w") as f:
                f.write(rep)
            regs = re.search(r"Used (\d+) registers", rep)
            line.append(f"{name}: {flops / ms / 1e9:6.1f} TFLOP/s err {err:.1e} regs {regs.group(1) if regs else '?'}")
        print("  ".join(line), flush=True)


if __name__ == "__main__":
    main()
