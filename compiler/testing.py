"""Benchmarking and checking helpers with `triton.testing`'s semantics.

do_bench and do_bench_cudagraph are the runtime's (compiler/runtime/timing.py, which the autotuner
uses too); assert_close, Benchmark and perf_report are here.

    do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean")

Times `fn()` with CUDA events: one call, a ~5-call estimate, then enough warm-up calls to fill
`warmup` ms and enough timed calls to fill `rep` ms; before each timed call the L2 cache is flushed
by writing a 256 MB buffer. Returns the mean (or min/max/median/all) in milliseconds, or the
requested `quantiles`. Uses torch.cuda when torch is installed; otherwise CUDA events and a
memset through the driver (cuda-python).
"""
from __future__ import annotations

import os
import sys

import numpy as np

from .runtime.timing import _summarize, do_bench, do_bench_cudagraph  # noqa: F401  (triton.testing's names)

def _to_numpy(x):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype in (torch.bfloat16,) or str(x.dtype).startswith("torch.float8"):
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def assert_close(x, y, atol=None, rtol=None, err_msg=""):
    """Element-wise closeness (numpy.testing.assert_allclose), accepting torch tensors, numpy arrays
    and scalars; atol/rtol default to 1e-2 / 0 as in Triton, and may be callables of the dtype."""
    a, b = _to_numpy(x), _to_numpy(y)
    if callable(atol):
        atol = atol(a.dtype)
    if callable(rtol):
        rtol = rtol(a.dtype)
    atol = 1e-2 if atol is None else atol
    rtol = 0.0 if rtol is None else rtol
    if a.dtype == np.bool_ or b.dtype == np.bool_:
        np.testing.assert_array_equal(a, b, err_msg=err_msg)
        return
    np.testing.assert_allclose(a.astype(np.float64) if a.dtype.kind != "c" else a,
                               b.astype(np.float64) if b.dtype.kind != "c" else b,
                               atol=atol, rtol=rtol, equal_nan=True, err_msg=err_msg)


class Benchmark:
    """Triton's `testing.Benchmark`: a sweep over `x_vals` (for the `x_names` arguments) and
    `line_vals` (for `line_arg`), reported as a table (and a plot when matplotlib is there)."""

    def __init__(self, x_names, x_vals, line_arg, line_vals, line_names, plot_name, args=None, xlabel="",
                 ylabel="", x_log=False, y_log=False, styles=None, color=None):
        self.x_names, self.x_vals = list(x_names), list(x_vals)
        self.line_arg, self.line_vals, self.line_names = line_arg, list(line_vals), list(line_names)
        self.plot_name, self.args = plot_name, dict(args or {})
        self.xlabel, self.ylabel, self.x_log, self.y_log = xlabel, ylabel, x_log, y_log
        self.styles = styles


class Mark:
    def __init__(self, fn, benchmarks):
        self.fn = fn
        self.benchmarks = benchmarks

    def _run(self, bench: Benchmark, save_path: str, show_plots: bool, print_data: bool, **kwargs):
        rows = []
        for x in bench.x_vals:
            xs = x if isinstance(x, (list, tuple)) and len(bench.x_names) > 1 else [x] * len(bench.x_names)
            xargs = dict(zip(bench.x_names, xs))
            row = [x if not isinstance(x, (list, tuple)) else x[0]]
            for lv in bench.line_vals:
                ret = self.fn(**xargs, **{bench.line_arg: lv}, **bench.args, **kwargs)
                row.append(ret[0] if isinstance(ret, (tuple, list)) else ret)
            rows.append(row)
        header = [bench.x_names[0]] + list(bench.line_names)
        if print_data:
            print(bench.plot_name + ":")
            widths = [max(len(str(h)), 12) for h in header]
            print("  ".join(str(h).rjust(w) for h, w in zip(header, widths)))
            for r in rows:
                print("  ".join((f"{v:.3f}" if isinstance(v, float) else str(v)).rjust(w) for v, w in zip(r, widths)))
        if save_path or show_plots:
            try:
                import matplotlib  # noqa: PLC0415 - optional: plots only when matplotlib is installed
                if not show_plots:
                    matplotlib.use("Agg")
                import matplotlib.pyplot as plt  # noqa: PLC0415 - after the backend is chosen
                fig, ax = plt.subplots()
                for i, name in enumerate(bench.line_names):
                    ax.plot([r[0] for r in rows], [r[i + 1] for r in rows], label=name)
                ax.set_xlabel(bench.xlabel or bench.x_names[0])
                ax.set_ylabel(bench.ylabel)
                if bench.x_log:
                    ax.set_xscale("log")
                if bench.y_log:
                    ax.set_yscale("log")
                ax.legend()
                if save_path:
                    os.makedirs(save_path, exist_ok=True)
                    fig.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
                if show_plots:
                    plt.show()
                plt.close(fig)
            except ImportError:
                pass
        try:
            import pandas as pd  # noqa: PLC0415 - optional: a DataFrame when pandas is installed
            return pd.DataFrame(rows, columns=header)
        except ImportError:
            return [dict(zip(header, r)) for r in rows]

    def run(self, show_plots=False, print_data=False, save_path="", return_df=False, **kwargs):
        benches = self.benchmarks if isinstance(self.benchmarks, list) else [self.benchmarks]
        out = [self._run(b, save_path, show_plots, print_data, **kwargs) for b in benches]
        if return_df:
            return out[0] if len(out) == 1 else out
        return None


def perf_report(benchmarks):
    """Decorator: `@perf_report(Benchmark(...))` makes `fn.run(print_data=True)` sweep and report."""
    return lambda fn: Mark(fn, benchmarks)


__all__ = ["do_bench", "do_bench_cudagraph", "assert_close", "Benchmark", "perf_report", "Mark"]
