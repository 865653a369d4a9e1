"""Read the compilers' output before guessing: for the tutorial kernels, write Triton's and
blocktune's PTX and SASS side by side under $OUT, with `ptxas -v` (registers, spills) and a
count of the SASS instructions by opcode, and print a short comparison.

Run on a GPU machine (Triton compiles for the device it sees):  python3 bench/inspect_kernels.py
"""
from __future__ import annotations

import collections
import os
import re
import subprocess
import tempfile

from common import load_twice

import torch

tri, bt = load_twice("tutorial_kernels.py")
OUT = os.environ.get("OUT", "/tmp/inspect")
os.makedirs(OUT, exist_ok=True)


def ptxas_v(ptx: str) -> tuple[str, str]:
    target = re.search(r"^\.target\s+(\w+)", ptx, re.M)
    arch = target.group(1) if target else "sm_90"
    with tempfile.TemporaryDirectory() as d:
        src, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        open(src, "w").write(ptx)
        r = subprocess.run(["ptxas", "-v", f"-arch={arch}", src, "-o", cubin], capture_output=True, text=True)
        sass = subprocess.run(["cuobjdump", "--dump-sass", cubin], capture_output=True, text=True).stdout
        return r.stderr.strip(), sass


def opcode_counts(sass: str) -> collections.Counter:
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass)
    return collections.Counter(o.split(".")[0] for o in ops)


def compare(tag, tri_ptx, bt_ptx):
    rows = []
    for name, ptx in (("triton", tri_ptx), ("blocktune", bt_ptx)):
        open(f"{OUT}/{tag}.{name}.ptx", "w").write(ptx)
        info, sass = ptxas_v(ptx)
        open(f"{OUT}/{tag}.{name}.sass", "w").write(sass)
        regs = re.search(r"Used (\d+) registers", info)
        spill = re.search(r"(\d+) bytes spill stores", info)
        counts = opcode_counts(sass)
        rows.append((name, regs.group(1) if regs else "?", spill.group(1) if spill else "?", sum(counts.values()), counts))
    print(f"== {tag}")
    for name, regs, spill, total, counts in rows:
        top = ", ".join(f"{k} {v}" for k, v in counts.most_common(12))
        print(f"  {name:9s} regs {regs:>3s} spills {spill:>3s} SASS {total:4d}: {top}")


def softmax(m, n, warps):
    x = torch.randn(m, n, device="cuda")
    y = torch.empty_like(x)
    block = 1 << (n - 1).bit_length()
    args = (y, x, x.stride(0), y.stride(0), m, n)
    k_tri = tri.softmax_kernel.warmup(*args, BLOCK_SIZE=block, num_stages=2, num_warps=warps, grid=(m,))
    k_bt = bt.softmax_kernel.warmup(*args, BLOCK_SIZE=block, num_stages=2, num_warps=warps, grid=(m,))
    compare(f"softmax_{m}x{n}_w{warps}", k_tri.asm["ptx"], k_bt.asm["ptx"])


def layer_norm(m, n):
    x = torch.randn(m, n, device="cuda", dtype=torch.float16)
    w = torch.rand(n, device="cuda", dtype=torch.float16)
    b = torch.rand(n, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    block = min(65536 // 2, 1 << (n - 1).bit_length())
    warps = min(max(block // 256, 1), 8)
    args = (x, y, w, b, mean, rstd, x.stride(0), n, 1e-5)
    k_tri = tri._layer_norm_fwd_fused.warmup(*args, BLOCK_SIZE=block, num_warps=warps, grid=(m,))
    k_bt = bt._layer_norm_fwd_fused.warmup(*args, BLOCK_SIZE=block, num_warps=warps, grid=(m,))
    compare(f"layernorm_{m}x{n}", k_tri.asm["ptx"], k_bt.asm["ptx"])


if __name__ == "__main__":
    import sys
    todo = sys.argv[1:] or ["ln:1024", "softmax:4096:16"]
    for item in todo:
        kind, *nums = item.split(":")
        if kind == "ln":
            layer_norm(4096, int(nums[0]))
        else:
            softmax(4096, int(nums[0]), int(nums[1]))
    print(f"PTX and SASS written to {OUT}")
