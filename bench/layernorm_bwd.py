"""Layer-norm backward (Triton's tutorial 05 backward) on the GPU: blocktune against Triton and
torch in the same run.

fp16, M = 4096 rows, N ∈ 1024, 2048, 4096, 8192 (the tutorial's sweep). Both compilers run the same
text (bench/layernorm_bwd_kernels.py: the dx kernel with its spin-locked partial dw/db, then the
dw/db reduction) with the tutorial's launch choices; torch is autograd through
torch.nn.functional.layer_norm. GB/s counts the tutorial's 3 × x bytes (x, dy read, dx written).
Every output is checked against torch first. Timing: do_bench median (CUDA events, L2 flush).
Prints a table with × Triton ratios and writes JSON to $OUT/layernorm_bwd.json when OUT is set.
"""
from __future__ import annotations

import sys

from common import load_twice, report, result_row

import torch

tri, bt = load_twice("layernorm_bwd_kernels.py")

if tri is not None:
    from triton.testing import do_bench
else:
    from compiler.testing import do_bench

DEV = "cuda"
ROWS: list[dict] = []


def bench(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def check(name, got, ref, tol):
    err = (got.double() - ref.double()).abs().max().item()
    scale = ref.double().abs().max().item()
    if not err <= tol * max(scale, 1.0):
        raise AssertionError(f"{name}: wrong result (max abs error {err}, reference scale {scale})")


def run_case(m, n, eps=1e-5):
    x = -2.3 + 0.5 * torch.randn(m, n, device=DEV, dtype=torch.float16)
    w = torch.rand(n, device=DEV, dtype=torch.float16)
    b = torch.rand(n, device=DEV, dtype=torch.float16)
    dy = 0.1 * torch.randn_like(x)
    xf = x.float()
    mean = xf.mean(1)
    rstd = 1 / torch.sqrt(xf.var(1, unbiased=False) + eps)
    # torch: autograd through layer_norm (the reference and the baseline)
    xr = x.detach().requires_grad_()
    wr, br = w.detach().requires_grad_(), b.detach().requires_grad_()
    y = torch.nn.functional.layer_norm(xr, (n,), wr, br, eps)
    ref = torch.autograd.grad(y.float(), (xr, wr, br), dy.float(), retain_graph=True)
    t_torch = bench(lambda: torch.autograd.grad(y, (xr, wr, br), dy, retain_graph=True))
    times = {}
    for name, mod in (("blocktune", bt), ("triton", tri)):
        if mod is None:
            times[name] = None
            continue
        run = lambda: mod.layer_norm_backward(dy, x, w, mean, rstd)  # noqa: E731
        dx, dw, db = run()
        torch.cuda.synchronize()
        for what, got, want in (("dx", dx, ref[0]), ("dw", dw, ref[1]), ("db", db, ref[2])):
            check(f"{name} {what} {m}x{n}", got, want, 2e-2)
        times[name] = bench(run)
    ROWS.append(result_row("layer_norm_bwd", f"{m}x{n}", 3 * x.numel() * x.element_size() / 1e9, "gbs", times, t_torch))


def main():
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"triton {getattr(sys.modules.get('triton'), '__version__', 'absent')}", flush=True)
    ns = [int(a) for a in sys.argv[1:]] or [1024, 2048, 4096, 8192]
    for n in ns:
        run_case(4096, n)
    report(ROWS, "layer_norm_bwd", "gbs", "layernorm_bwd.json")


if __name__ == "__main__":
    main()
