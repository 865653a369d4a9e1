"""The GPU child's data without torch: device buffers, copies, CUDA events and CUDA graphs through
the driver API (cuda-python, as compiler/runtime/driver.py), inputs from numpy.

Why: `import torch` was the longest part of a tuning run's start (3.6 s of a 7.5 s cold run in
docs/performance.md), and the child needs none of torch but memory and timing. The protocol is
tuner/measure.py's CudaTimer one for one: warm-up, repeats with the in-place outputs reset and the
L2 cache flushed (a 256 MB memset) outside the timed region, CUDA graphs of a batch of launches for
kernels under ~10 µs. Everything runs on one stream of the device's primary context.
BLOCKTUNE_CHILD_TORCH=1 gives the torch data plane back.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from compiler.runtime import driver
from tuner.host_data import NUMPY, compare, make_array
from tuner.measure import L2_FLUSH_BYTES, Measurement, n_reps

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int16": 2, "int32": 4,
             "int64": 8, "uint8": 1, "bool": 1}


def _ck(result, call: str):
    return driver._check(result, call)


class DeviceBuffer:
    """A tensor argument: device memory with a shape and a dtype name (what the compiler's runtime
    reads from a tensor-like object: `data_ptr()` and `dtype`)."""

    def __init__(self, plane: "DriverPlane", shape: tuple[int, ...], dtype: str):
        self.plane, self.shape, self.dtype = plane, tuple(int(s) for s in shape), dtype
        self.nbytes = max(1, math.prod(self.shape) * _ITEMSIZE[dtype])
        self.ptr = int(_ck(driver._driver().cuMemAlloc(self.nbytes), "cuMemAlloc"))

    def data_ptr(self) -> int:
        return self.ptr

    def upload(self, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        _ck(driver._driver().cuMemcpyHtoD(self.ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def download(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=NUMPY[self.dtype])
        self.plane.sync()
        _ck(driver._driver().cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    def clone(self) -> "DeviceBuffer":
        c = DeviceBuffer(self.plane, self.shape, self.dtype)
        c.copy_(self)
        return c

    def copy_(self, src: "DeviceBuffer") -> None:
        _ck(driver._driver().cuMemcpyDtoDAsync(self.ptr, src.ptr, self.nbytes, self.plane.stream),
            "cuMemcpyDtoDAsync")


class DriverPlane:
    def __init__(self, index: int):
        cu = driver._driver()
        driver.ensure_context(index)
        self.index = index
        self.stream = _ck(cu.cuStreamCreate(0), "cuStreamCreate")
        self.stream_handle = int(self.stream)
        self._events: list = []

    # --- data -----------------------------------------------------------------------------------
    def make_args(self, spec) -> tuple[list[Any], dict[str, DeviceBuffer], dict[str, Any]]:
        """(positional kernel args in spec order, buffers by name, the expression environment)."""
        env = spec.scalar_env()
        shapes = spec.shapes()
        tensors: dict[str, DeviceBuffer] = {}
        args: list[Any] = []
        for i, a in enumerate(spec.args):
            if a.is_tensor:
                host = make_array(a.tensor, tuple(shapes[a.name]), spec.seed * 1000 + i)
                buf = DeviceBuffer(self, tuple(shapes[a.name]), a.tensor.dtype)
                buf.upload(host)
                tensors[a.name] = buf
                args.append(buf)
            else:
                args.append(env[a.name])
        return args, tensors, env

    def compare(self, out: DeviceBuffer, ref: np.ndarray, atol: float, rtol: float) -> str | None:
        return compare(out.download(), ref, out.dtype, atol, rtol)

    def sync(self) -> None:
        _ck(driver._driver().cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def context_ok(self) -> bool:
        """After an error on the GPU: is the context still usable (a copy there and back)?"""
        try:
            self.sync()
            probe = DeviceBuffer(self, (4,), "int32")
            probe.upload(np.arange(4, dtype=np.int32))
            ok = probe.download().tolist() == [0, 1, 2, 3]
            _ck(driver._driver().cuMemFree(probe.ptr), "cuMemFree")
            return ok
        except Exception:  # noqa: BLE001 - any failure means the context is gone
            return False

    # --- timing ---------------------------------------------------------------------------------
    def events(self, n: int) -> list:
        cu = driver._driver()
        while len(self._events) < n:
            self._events.append(_ck(cu.cuEventCreate(0), "cuEventCreate"))
        return self._events[:n]

    def record(self, ev) -> None:
        _ck(driver._driver().cuEventRecord(ev, self.stream), "cuEventRecord")

    def elapsed_ms(self, start, end) -> float:
        return float(_ck(driver._driver().cuEventElapsedTime(start, end), "cuEventElapsedTime"))


class DriverTimer:
    """tuner.measure.CudaTimer's protocol on a DriverPlane's stream."""

    def __init__(self, plane: DriverPlane, *, flush_l2: bool = True):
        self.plane = plane
        self.flush_buf = DeviceBuffer(plane, (L2_FLUSH_BYTES // 4,), "int32") if flush_l2 else None

    def flush(self) -> None:
        if self.flush_buf is not None:
            _ck(driver._driver().cuMemsetD32Async(self.flush_buf.ptr, 0, L2_FLUSH_BYTES // 4, self.plane.stream),
                "cuMemsetD32Async")

    def _time_ms(self, body: Callable[[], None], n: int) -> float:
        p = self.plane
        start, end = p.events(2)
        p.record(start)
        for _ in range(n):
            body()
        p.record(end)
        p.sync()
        return p.elapsed_ms(start, end) / n

    def _overhead_ms(self, reset) -> float:
        if reset is None and self.flush_buf is None:
            return 0.0

        def body():
            if reset:
                reset()
            self.flush()
        return self._time_ms(body, 5)

    def measure(self, fn: Callable[[], None], reset: Callable[[], None] | None = None, *, warmup_ms: float = 25.0,
                rep_ms: float = 100.0, min_reps: int = 10, max_reps: int = 1000, cuda_graph: str = "auto",
                cuda_graph_below_us: float = 10.0) -> Measurement:
        p = self.plane
        fn()
        p.sync()
        if reset:
            reset()
        est = self._time_ms(fn, 5)
        overhead = self._overhead_ms(reset)
        use_graph = cuda_graph == "always" or (cuda_graph == "auto" and est * 1e3 < cuda_graph_below_us)
        if use_graph:
            return self._measure_graph(fn, reset, est, warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps,
                                       max_reps=max_reps, overhead_ms=overhead)
        for _ in range(n_reps(est + overhead, warmup_ms, 1, 10_000)):
            fn()
        reps = n_reps(est + overhead, rep_ms, min_reps, max_reps)
        evs = p.events(2 * reps)
        for i in range(reps):
            if reset:
                reset()
            self.flush()
            p.record(evs[2 * i])
            fn()
            p.record(evs[2 * i + 1])
        p.sync()
        return Measurement([p.elapsed_ms(evs[2 * i], evs[2 * i + 1]) for i in range(reps)], "events")

    def _measure_graph(self, fn, reset, est_ms: float, *, warmup_ms, rep_ms, min_reps, max_reps,
                       overhead_ms: float = 0.0) -> Measurement:
        cu = driver._driver()
        p = self.plane
        batch = max(1, min(1000, int(0.2 / max(est_ms, 1e-4))))
        for _ in range(3):
            fn()
        p.sync()
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        _ck(cu.cuStreamBeginCapture(p.stream, mode), "cuStreamBeginCapture")
        try:
            for _ in range(batch):
                fn()
        finally:
            graph = _ck(cu.cuStreamEndCapture(p.stream), "cuStreamEndCapture")
        exe = _ck(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        try:
            def replay():
                _ck(cu.cuGraphLaunch(exe, p.stream), "cuGraphLaunch")

            batch_ms = est_ms * batch
            for _ in range(n_reps(batch_ms + overhead_ms, warmup_ms, 1, 1000)):
                replay()
            reps = n_reps(batch_ms + overhead_ms, rep_ms, min_reps, max_reps)
            evs = p.events(2 * reps)
            for i in range(reps):
                if reset:
                    reset()
                self.flush()
                p.record(evs[2 * i])
                replay()
                p.record(evs[2 * i + 1])
            p.sync()
            return Measurement([p.elapsed_ms(evs[2 * i], evs[2 * i + 1]) / batch for i in range(reps)],
                               "cuda-graph")
        finally:
            cu.cuGraphExecDestroy(exe)
            cu.cuGraphDestroy(graph)
