"""Seeded dropout (Triton's tutorial 04) on the GPU: blocktune against Triton and torch, in one run.

fp32 and fp16 inputs of 2^20 … 2^28 elements, p = 0.5. Both compilers run the same kernel text
(bench/dropout_kernels.py) over the same (BLOCK_SIZE, num_warps) list; each framework's best is
reported. torch is torch.nn.functional.dropout (its own Philox, mask not stored). Before timing,
blocktune's output is checked against torch's reference formula with the mask it must produce, and,
when Triton is installed, against Triton's output bit for bit (same seed, same offsets).
Prints a table (GB/s over the bytes read and written, ratios) and writes $OUT/dropout.json when
OUT is set.
"""
from __future__ import annotations

import sys

from common import geomean, load_twice, report, result_row

import torch

tri, bt = load_twice("dropout_kernels.py")

if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

DEV = "cuda"
P = 0.5
SEED = 123456789
CONFIGS = [(1024, 4), (2048, 4), (4096, 8), (8192, 8)]
ROWS: list[dict] = []


def bench(fn):
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def launch(mod, x, out, block, warps):
    n = x.numel()
    return lambda: mod._seeded_dropout[((n + block - 1) // block,)](x, out, n, P, SEED, BLOCK_SIZE=block, num_warps=warps)


def check(x, out):
    kept = out != 0
    frac = kept.float().mean().item()
    if abs(frac - (1 - P)) > 0.01:
        raise AssertionError(f"dropout kept {frac:.4f} of the elements, expected about {1 - P}")
    ref = torch.where(kept, x.float() / (1 - P), 0.0).to(x.dtype)
    if not torch.allclose(out.float(), ref.float(), rtol=1e-3 if x.dtype == torch.float16 else 1e-6, atol=0):
        raise AssertionError("dropout: wrong values for the kept elements")


def run(log2n, dtype):
    n = 1 << log2n
    x = (torch.randn(n, device=DEV) + 4).to(dtype)  # no zeros, so out != 0 is the mask
    outs, times = {}, {}
    for name, mod in (("blocktune", bt), ("triton", tri)):
        if mod is None:
            times[name] = None
            continue
        best = None
        for block, warps in CONFIGS:
            out = torch.full_like(x, float("nan"))
            fn = launch(mod, x, out, block, warps)
            fn()
            torch.cuda.synchronize()
            check(x, out)
            outs[name] = out
            t = bench(fn)
            best = t if best is None or t < best else best
        times[name] = best
    if tri is not None and not torch.equal(outs["blocktune"], outs["triton"]):
        diff = (outs["blocktune"] != outs["triton"]).sum().item()
        raise AssertionError(f"blocktune and Triton disagree on {diff} of {n} elements for the same seed")
    t_torch = bench(lambda: torch.nn.functional.dropout(x, P, training=True))
    shape = f"{str(dtype).replace('torch.', '')} 2^{log2n}"
    ROWS.append(result_row("seeded_dropout", shape, 2 * n * x.element_size() / 1e9, "gbs", times, t_torch))


def main():
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {getattr(sys.modules.get('triton'), '__version__', 'absent')}", flush=True)
    for dtype in (torch.float32, torch.float16):
        for log2n in (20, 24, 26, 28):
            run(log2n, dtype)
    report(ROWS, "seeded dropout", "gbs", "dropout.json")
    print(f"seeded dropout: geomean × torch {geomean([r['vs_torch'] for r in ROWS]):.3f}")


if __name__ == "__main__":
    main()
