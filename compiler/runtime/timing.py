"""Timing kernels with `triton.testing.do_bench`'s protocol (the autotuner's clock; compiler.testing
re-exports it).

    do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean")

Times `fn()` with CUDA events: one call, a ~5-call estimate, then enough warm-up calls to fill
`warmup` ms and enough timed calls to fill `rep` ms; before each timed call the L2 cache is flushed
by writing a 256 MB buffer. Returns the mean (or min/max/median/all) in milliseconds, or the
requested `quantiles`. Uses torch.cuda when torch is installed; otherwise CUDA events and a
memset through the driver (cuda-python).
"""
from __future__ import annotations

import math
import statistics

from . import driver

_CACHE_BYTES = 256 * 1024 * 1024
_MODES = ("min", "max", "mean", "median", "all")


def _torch():
    try:
        import torch  # noqa: PLC0415 - optional, and seconds to import: only when timing on torch's streams
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch


def _quantile(sorted_times: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (torch.quantile's default)."""
    n = len(sorted_times)
    if n == 1:
        return sorted_times[0]
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_times[lo] + (sorted_times[hi] - sorted_times[lo]) * (pos - lo)


def _summarize(times: list[float], quantiles, return_mode: str):
    if quantiles is not None:
        s = sorted(times)
        ret = [_quantile(s, float(q)) for q in quantiles]
        return ret[0] if len(ret) == 1 else ret
    if return_mode == "all":
        return list(times)
    if return_mode == "min":
        return min(times)
    if return_mode == "max":
        return max(times)
    if return_mode == "median":
        s = sorted(times)   # torch.median: the lower of the two middle values
        return s[(len(s) - 1) // 2]
    return statistics.fmean(times)


class _DriverTimer:
    """CUDA events and an L2-flush buffer through cuda-python (no torch)."""

    def __init__(self):
        driver.ensure_context()
        self.cu = driver._driver()
        self.check = driver._check
        self.buf = None

    def allocate_flush_buffer(self):
        self.buf = self.check(self.cu.cuMemAlloc(_CACHE_BYTES), "cuMemAlloc")

    def event(self):
        return self.check(self.cu.cuEventCreate(0), "cuEventCreate")

    def record(self, ev):
        self.check(self.cu.cuEventRecord(ev, 0), "cuEventRecord")

    def elapsed(self, a, b) -> float:
        return float(self.check(self.cu.cuEventElapsedTime(a, b), "cuEventElapsedTime"))

    def flush(self):
        self.check(self.cu.cuMemsetD32Async(self.buf, 0, _CACHE_BYTES // 4, 0), "cuMemsetD32Async")

    def sync(self):
        self.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def close(self):
        if self.buf is None:
            return
        try:
            self.cu.cuMemFree(self.buf)
        except Exception:
            pass


class _TorchTimer:
    """The same primitives on torch's current stream and allocator."""

    def __init__(self, torch):
        self.torch = torch
        self.buf = None

    def allocate_flush_buffer(self):
        self.buf = self.torch.empty(_CACHE_BYTES // 4, dtype=self.torch.int, device="cuda")

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, ev):
        ev.record()

    def elapsed(self, a, b) -> float:
        return a.elapsed_time(b)

    def flush(self):
        self.buf.zero_()

    def sync(self):
        self.torch.cuda.synchronize()

    def close(self):
        pass


def _timer():
    """The clock do_bench uses: torch's events and stream when torch has CUDA, else the driver's."""
    torch = _torch()
    return _TorchTimer(torch) if torch is not None else _DriverTimer()


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    """Milliseconds per call of `fn` (see the module doc). Triton's semantics and defaults, step for
    step: the first call (which may compile and load the kernel) is waited for before the flush
    buffer exists; the estimate times 5 flushed calls; the warm-up calls are not flushed."""
    if return_mode not in _MODES:
        raise ValueError(f"return_mode must be one of {_MODES}")
    t = _timer()
    try:
        fn()
        t.sync()
        t.allocate_flush_buffer()
        a, b = t.event(), t.event()
        t.record(a)
        for _ in range(5):
            t.flush()
            fn()
        t.record(b)
        t.sync()
        estimate_ms = t.elapsed(a, b) / 5
        n_warmup = max(1, int(warmup / max(estimate_ms, 1e-6)))
        n_repeat = max(1, int(rep / max(estimate_ms, 1e-6)))
        starts = [t.event() for _ in range(n_repeat)]
        ends = [t.event() for _ in range(n_repeat)]
        for _ in range(n_warmup):
            fn()
        for i in range(n_repeat):
            if grad_to_none is not None:
                for x in grad_to_none:
                    x.grad = None
            t.flush()
            t.record(starts[i])
            fn()
            t.record(ends[i])
        t.sync()
        times = [t.elapsed(s, e) for s, e in zip(starts, ends)]
        return _summarize(times, quantiles, return_mode)
    finally:
        t.close()


def do_bench_cudagraph(fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean"):
    """Like do_bench, but `fn` is captured `n` times into one CUDA graph and the graph replayed
    (removes host launch overhead from the measurement). Needs torch."""
    import torch  # noqa: PLC0415 - optional (see _torch)
    if return_mode not in _MODES:
        raise ValueError(f"return_mode must be one of {_MODES}")
    with torch.cuda.stream(torch.cuda.Stream()):
        fn()  # compile, load and warm up outside the capture
        if grad_to_none is not None:
            for x in grad_to_none:
                x.detach_()
                x.requires_grad_(True)
                x.grad = None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        start.record()
        g.replay()
        end.record()
        torch.cuda.synchronize()
        estimate_ms = start.elapsed_time(end)
        n_repeat = max(1, int(rep / max(estimate_ms, 1e-6)))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n_repeat):
                if grad_to_none is not None:
                    for x in grad_to_none:
                        x.grad = None
                fn()
        torch.cuda.synchronize()
        ret = []
        for _ in range(10):
            start.record()
            g.replay()
            end.record()
            torch.cuda.synchronize()
            ret.append(start.elapsed_time(end) / n_repeat)
        return _summarize(ret, quantiles, return_mode)
