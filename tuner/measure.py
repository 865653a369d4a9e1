"""The measurement protocol.

GPU (torch.cuda): warm-up, then repeats for about `rep_ms` (between `min_reps` and `max_reps`),
each timed with a pair of CUDA events; before every repeat the in-place outputs are reset and the
L2 cache is flushed by zeroing a 256 MB buffer, both outside the timed region. The warm-up and
repeat counts are Triton's do_bench ones, whose estimate times the cache clearing with the kernel:
`warmup_ms` and `rep_ms` divided by the time of one repeat *with* its reset and flush. A 15 µs
kernel behind an 85 µs flush gets ~100 µs per repeat: ~250 warm-up runs and ~1000 repeats, so
`rep_ms` is the wall time the repeats take, not 5–7× more. Kernels shorter than ~10 µs are timed
through a CUDA graph holding a batch of launches (the launch overhead would otherwise dominate); a
sample is then the batch time divided by its size. tuner/device_plane.py's DriverTimer follows the
same protocol without torch.
CPU (interpret mode): the same protocol with time.perf_counter.

The result keeps every sample; the summary is the median with its spread (p20, p80, min, max).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

L2_FLUSH_BYTES = 256 * 1024 * 1024


@dataclass
class Measurement:
    samples_ms: list[float] = field(default_factory=list)
    method: str = "events"           # events | cuda-graph | cpu

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def spread(self) -> dict[str, float]:
        return spread(self.samples_ms)


def quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted data."""
    if not sorted_xs:
        raise ValueError("no samples")
    pos = (len(sorted_xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def spread(samples: list[float]) -> dict[str, float]:
    xs = sorted(samples)
    return {"p20": quantile(xs, 0.2), "p80": quantile(xs, 0.8), "min": xs[0], "max": xs[-1], "n": len(xs)}


def n_reps(estimate_ms: float, budget_ms: float, lo: int, hi: int) -> int:
    if estimate_ms <= 0:
        return hi
    return max(lo, min(hi, int(budget_ms / estimate_ms)))


def measure_cpu(fn: Callable[[], None], reset: Callable[[], None] | None = None, *, warmup_ms: float = 0.0,
                rep_ms: float = 100.0, min_reps: int = 3, max_reps: int = 20) -> Measurement:
    """Interpret mode: wall-clock time of `fn` on the CPU."""
    def once() -> float:
        if reset:
            reset()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    first = once()
    deadline = time.perf_counter() + warmup_ms / 1e3
    while time.perf_counter() < deadline:
        once()
    reps = n_reps(first, rep_ms, min_reps, max_reps)
    return Measurement([once() for _ in range(reps)], "cpu")


class CudaTimer:
    """CUDA-event timing with L2 flush; CUDA graphs for short kernels. Lives in the GPU child."""

    def __init__(self, device, *, flush_l2: bool = True):
        import torch

        self.torch = torch
        self.device = device
        self.flush_buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device) if flush_l2 else None

    def flush(self) -> None:
        if self.flush_buf is not None:
            self.flush_buf.zero_()

    def _overhead_ms(self, reset) -> float:
        """Wall time per repeat spent outside the timed region: the reset and the L2 flush."""
        torch = self.torch
        if reset is None and self.flush_buf is None:
            return 0.0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n = 5
        start.record()
        for _ in range(n):
            if reset:
                reset()
            self.flush()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / n

    def _estimate_ms(self, fn, reset) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n = 5
        if reset:
            reset()
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / n

    def measure(self, fn: Callable[[], None], reset: Callable[[], None] | None = None, *, warmup_ms: float = 25.0,
                rep_ms: float = 100.0, min_reps: int = 10, max_reps: int = 1000, cuda_graph: str = "auto",
                cuda_graph_below_us: float = 10.0) -> Measurement:
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        est = self._estimate_ms(fn, reset)
        overhead = self._overhead_ms(reset)
        use_graph = cuda_graph == "always" or (cuda_graph == "auto" and est * 1e3 < cuda_graph_below_us)
        if use_graph:
            return self._measure_graph(fn, reset, est, warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps,
                                       max_reps=max_reps, overhead_ms=overhead)
        # warm-up (back-to-back runs for warmup_ms of kernel time)
        for _ in range(n_reps(est + overhead, warmup_ms, 1, 10_000)):
            fn()
        reps = n_reps(est + overhead, rep_ms, min_reps, max_reps)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if reset:
                reset()
            self.flush()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return Measurement([s.elapsed_time(e) for s, e in zip(starts, ends)], "events")

    def _measure_graph(self, fn, reset, est_ms: float, *, warmup_ms, rep_ms, min_reps, max_reps,
                       overhead_ms: float = 0.0) -> Measurement:
        torch = self.torch
        # a batch long enough (~200 µs) that event resolution and graph launch do not matter
        batch = max(1, min(1000, int(0.2 / max(est_ms, 1e-4))))
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(batch):
                fn()
        torch.cuda.synchronize()
        batch_ms = est_ms * batch
        for _ in range(n_reps(batch_ms + overhead_ms, warmup_ms, 1, 1000)):
            graph.replay()
        reps = n_reps(batch_ms + overhead_ms, rep_ms, min_reps, max_reps)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if reset:
                reset()
            self.flush()
            starts[i].record()
            graph.replay()
            ends[i].record()
        torch.cuda.synchronize()
        del graph
        return Measurement([s.elapsed_time(e) / batch for s, e in zip(starts, ends)], "cuda-graph")
