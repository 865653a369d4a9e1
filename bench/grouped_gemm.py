"""Grouped GEMM (Triton's tutorial 08) on the GPU: blocktune against Triton and torch in the same run.

Groups of 4 square fp16 problems N×N×N, N ∈ 128 … 2048 (the tutorial's sweep). Both compilers run
the same text (bench/grouped_gemm_kernels.py), autotuned over the tutorial's configs; torch runs
one torch.matmul per problem. Every output is checked against torch first. Timing: do_bench median.
Prints TFLOP/s with × Triton ratios and writes JSON to $OUT/grouped_gemm.json when OUT is set.
"""
from __future__ import annotations

import sys

from common import load_twice, report, result_row

import torch

tri, bt = load_twice("grouped_gemm_kernels.py")

if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

DEV = "cuda"
GROUP = 4
ROWS: list[dict] = []


def bench(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def run_case(n):
    As = [torch.rand(n, n, device=DEV, dtype=torch.float16) for _ in range(GROUP)]
    Bs = [torch.rand(n, n, device=DEV, dtype=torch.float16) for _ in range(GROUP)]
    refs = [a @ b for a, b in zip(As, Bs)]
    t_torch = bench(lambda: [torch.matmul(a, b) for a, b in zip(As, Bs)])
    times = {}
    for name, mod in (("blocktune", bt), ("triton", tri)):
        if mod is None:
            times[name] = None
            continue
        args, Cs = mod.group_gemm_args(As, Bs)
        launch = lambda: mod.grouped_matmul_autotuned[lambda meta: (meta['NUM_SM'], )](*args)  # noqa: E731
        launch()  # autotunes
        torch.cuda.synchronize()
        for i, (c, ref) in enumerate(zip(Cs, refs)):
            if not torch.allclose(c.float(), ref.float(), atol=1e-2 * n ** 0.5, rtol=1e-2):
                raise AssertionError(f"{name} grouped gemm N={n} problem {i}: wrong result")
        times[name] = bench(launch)
    ROWS.append(result_row("grouped_gemm", f"{GROUP}x{n}^3", 2 * n ** 3 * GROUP / 1e12, "tflops", times, t_torch))


def main():
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {getattr(sys.modules.get('triton'), '__version__', 'absent')}", flush=True)
    ns = [int(a) for a in sys.argv[1:]] or [2 ** i for i in range(7, 12)]
    for n in ns:
        run_case(n)
    report(ROWS, "grouped_gemm", "tflops", "grouped_gemm.json")


if __name__ == "__main__":
    main()
