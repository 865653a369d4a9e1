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

import abc
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


class EventTimer(abc.ABC):
    """The GPU protocol (see the module doc) over a few primitives a subclass supplies: event
    pairs, a stream to sync, the L2 flush, and graph capture. Lives in the GPU child."""

    @abc.abstractmethod
    def flush(self) -> None:
        ...

    @abc.abstractmethod
    def events(self, n: int) -> list:
        """`n` timing events (recorded with record(), read with elapsed_ms())."""
        ...

    @abc.abstractmethod
    def record(self, ev) -> None:
        ...

    @abc.abstractmethod
    def elapsed_ms(self, start, end) -> float:
        ...

    @abc.abstractmethod
    def sync(self) -> None:
        ...

    @abc.abstractmethod
    def capture(self, fn: Callable[[], None], batch: int):
        """A CUDA graph of `batch` calls of `fn` → (replay, release)."""
        ...

    def _time_ms(self, body: Callable[[], None], n: int) -> float:
        start, end = self.events(2)
        self.record(start)
        for _ in range(n):
            body()
        self.record(end)
        self.sync()
        return self.elapsed_ms(start, end) / n

    def _overhead_ms(self, reset) -> float:
        """Wall time per repeat spent outside the timed region: the reset and the L2 flush."""
        def body():
            if reset:
                reset()
            self.flush()
        return self._time_ms(body, 5)

    def _repeats(self, run: Callable[[], None], reset, reps: int, per_sample: int = 1) -> list[float]:
        evs = self.events(2 * reps)
        for i in range(reps):
            if reset:
                reset()
            self.flush()
            self.record(evs[2 * i])
            run()
            self.record(evs[2 * i + 1])
        self.sync()
        return [self.elapsed_ms(evs[2 * i], evs[2 * i + 1]) / per_sample for i in range(reps)]

    def measure(self, fn: Callable[[], None], reset: Callable[[], None] | None = None, *, warmup_ms: float = 25.0,
                rep_ms: float = 100.0, min_reps: int = 10, max_reps: int = 1000, cuda_graph: str = "auto",
                cuda_graph_below_us: float = 10.0) -> Measurement:
        fn()
        self.sync()
        if reset:
            reset()
        est = self._time_ms(fn, 5)
        overhead = self._overhead_ms(reset)
        use_graph = cuda_graph == "always" or (cuda_graph == "auto" and est * 1e3 < cuda_graph_below_us)
        if not use_graph:
            for _ in range(n_reps(est + overhead, warmup_ms, 1, 10_000)):
                fn()
            reps = n_reps(est + overhead, rep_ms, min_reps, max_reps)
            return Measurement(self._repeats(fn, reset, reps), "events")
        # a batch long enough (~200 µs) that event resolution and graph launch do not matter
        batch = max(1, min(1000, int(0.2 / max(est, 1e-4))))
        replay, release = self.capture(fn, batch)
        try:
            batch_ms = est * batch
            for _ in range(n_reps(batch_ms + overhead, warmup_ms, 1, 1000)):
                replay()
            reps = n_reps(batch_ms + overhead, rep_ms, min_reps, max_reps)
            return Measurement(self._repeats(replay, reset, reps, batch), "cuda-graph")
        finally:
            release()


class CudaTimer(EventTimer):
    """EventTimer on torch's current stream (the GPU child's torch data plane)."""

    def __init__(self, device, *, flush_l2: bool = True):
        import torch

        self.torch = torch
        self.device = device
        self.flush_buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device) if flush_l2 else None

    def flush(self) -> None:
        if self.flush_buf is not None:
            self.flush_buf.zero_()

    def events(self, n: int) -> list:
        return [self.torch.cuda.Event(enable_timing=True) for _ in range(n)]

    def record(self, ev) -> None:
        ev.record()

    def elapsed_ms(self, start, end) -> float:
        return start.elapsed_time(end)

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def capture(self, fn, batch: int):
        torch = self.torch
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
        return graph.replay, lambda: None
