"""How the profiler times a launch or a scope.

On the GPU: a pair of CUDA events (torch's, `enable_timing=True`) recorded on the launch's stream
right before and right after it; the elapsed time is read later (at finalize, or when many are
pending), so timing never waits for the GPU. This is the time between the two events on the
stream: the kernel's run time when the GPU is busy with earlier work (a benchmark loop), plus the
host's launch overhead (~5-20 µs) when the GPU is idle and waits for the launch. Event resolution
is ~0.5 µs. CUPTI activity records (what proton uses) would give kernel-only times.

In interpret mode: the wall time of the interpreted launch on the CPU (perf_counter_ns), recorded
under device type INTERPRETER so that it is never mistaken for GPU time.
"""
from __future__ import annotations

import time

from .data import INTERPRETER_DEVICE, Node

_MAX_PENDING = 8192


class WallTimer:
    def __init__(self):
        self.start = time.perf_counter_ns()

    def stop(self, nodes: list[Node]) -> None:
        ns = time.perf_counter_ns() - self.start
        for node in nodes:
            node.add_time(ns, INTERPRETER_DEVICE, 0)


def _torch_stream(torch, handle):
    if handle is None or isinstance(handle, torch.cuda.Stream):
        return handle or torch.cuda.current_stream()
    handle = int(getattr(handle, "cuda_stream", handle))
    current = torch.cuda.current_stream()
    if handle == current.cuda_stream:
        return current
    return torch.cuda.ExternalStream(handle)


class EventTimers:
    """The GPU timings not read yet (each adds to the nodes of every session that was active)."""

    def __init__(self):
        import torch  # noqa: PLC0415 - the GPU path only
        self.torch = torch
        self.pending: list[tuple[list[Node], object, object, int]] = []

    def start(self, stream=None):
        ev = self.torch.cuda.Event(enable_timing=True)
        s = _torch_stream(self.torch, stream)
        ev.record(s)
        return ev, s

    def stop(self, nodes: list[Node], started) -> None:
        start, stream = started
        end = self.torch.cuda.Event(enable_timing=True)
        end.record(stream)
        self.pending.append((nodes, start, end, self.torch.cuda.current_device()))
        if len(self.pending) >= _MAX_PENDING:
            self.resolve()

    def resolve(self) -> None:
        """Read every pending pair (waits for the last one to complete)."""
        pending, self.pending = self.pending, []
        for nodes, start, end, device in pending:
            end.synchronize()
            ns = round(start.elapsed_time(end) * 1e6)
            for node in nodes:
                node.add_time(ns, "CUDA", device)
