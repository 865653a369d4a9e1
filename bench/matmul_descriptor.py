"""Tutorial 09's persistent matmul over device-side tensor descriptors (bench/persistent_matmul_kernels.py),
its tile loop marked `warp_specialize` or not, under blocktune and under Triton, and cuBLAS (torch).

Both compilers run the same kernel text at the same configs (the tutorial's Hopper tile 128×128×64,
GROUP_SIZE_M 8, and 128×256×64; 8 warps — the consumers' under warp specialization, which adds a
producer warpgroup: compiler/backend/warp_specialize.py), #SMs programs. fp16, A [M, K] and B [N, K]
(the tutorial's layout, C = A·Bᵀ). Every result is checked against torch in float64 first. Timing:
do_bench median (CUDA events, L2 flush).

    python bench/matmul_descriptor.py            # 4096³ and 8192³, with and without warp specialization
    python bench/matmul_descriptor.py --quick    # 4096³ only
Prints a table with × Triton ratios and writes $OUT/matmul_descriptor.json when OUT is set.
"""
from __future__ import annotations

import sys

from common import load_twice, report, result_row

import torch

tri, bt = load_twice("persistent_matmul_kernels.py")

if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

CONFIGS = [dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_stages=4, num_warps=8),
           dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_stages=3, num_warps=8)]


def rel_err(c, ref) -> float:
    return ((c.double() - ref).norm() / ref.norm()).item()


def main():
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {getattr(sys.modules.get('triton'), '__version__', 'absent')}", flush=True)
    rows = []
    for n in ([4096] if "--quick" in sys.argv else [4096, 8192]):
        a = torch.randn((n, n), device="cuda", dtype=torch.float16)
        b = torch.randn((n, n), device="cuda", dtype=torch.float16)
        ref = a.double() @ b.double().T
        t_torch = do_bench(lambda: torch.matmul(a, b.T), return_mode="median")  # noqa: B023
        for cfg in CONFIGS:
            for ws in (False, True):
                times = {}
                for name, mod in (("blocktune", bt), ("triton", tri)):
                    if mod is None:
                        times[name] = None
                        continue
                    run = lambda: mod.matmul_descriptor_persistent(a, b, sms, warp_specialize=ws, **cfg)  # noqa: B023, E731
                    err = rel_err(run(), ref)
                    if not err < 1e-2:
                        raise AssertionError(f"{name} {n}³ {cfg} ws={ws}: relative error {err:.3e}")
                    times[name] = do_bench(run, return_mode="median")
                shape = (f"{n}³ {cfg['BLOCK_SIZE_M']}×{cfg['BLOCK_SIZE_N']}×{cfg['BLOCK_SIZE_K']} s{cfg['num_stages']}"
                         f"{' ws' if ws else ''}")
                rows.append(result_row("matmul_descriptor", shape, 2.0 * n ** 3 / 1e12, "tflops", times, t_torch))
        del a, b, ref
        torch.cuda.empty_cache()
    report(rows, "matmul_descriptor", "tflops", "matmul_descriptor.json")


if __name__ == "__main__":
    main()
