"""The GPU child's data without torch: device buffers, copies, CUDA events and CUDA graphs through
the driver API (cuda-python, as compiler/runtime/driver.py), inputs from numpy.

Why: `import torch` was the longest part of a tuning run's start (3.6 s of a 7.5 s cold run in
docs/performance.md), and the child needs none of torch but memory and timing. The protocol is
tuner/measure.py's EventTimer protocol: warm-up, repeats with the in-place outputs reset and the
L2 cache flushed (a 256 MB memset) outside the timed region, CUDA graphs of a batch of launches for
kernels under ~10 µs. Everything runs on one stream of the device's primary context.
BLOCKTUNE_CHILD_TORCH=1 gives the torch data plane back.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.runtime import driver
from tuner.host_data import NUMPY, compare, host_arguments
from tuner.measure import L2_FLUSH_BYTES, EventTimer

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int16": 2, "int32": 4,
             "int64": 8, "uint8": 1, "bool": 1}


def _ck(result, call: str):
    return driver._check(result, call)


_held_bytes = 0   # device memory of this process's live DeviceBuffers (a warm child's leak check)


def held_bytes() -> int:
    """Bytes of device memory this process holds in DeviceBuffers not freed yet: what a warm child
    reports after a job (the device's free memory also moves with every other process on the GPU)."""
    return _held_bytes


class DeviceBuffer:
    """A tensor argument: device memory with a shape and a dtype name (what the compiler's runtime
    reads from a tensor-like object: `data_ptr()` and `dtype`)."""

    def __init__(self, plane: "DriverPlane", shape: tuple[int, ...], dtype: str):
        self.plane, self.shape, self.dtype = plane, tuple(int(s) for s in shape), dtype
        self.nbytes = max(1, math.prod(self.shape) * _ITEMSIZE[dtype])
        self.ptr = int(_ck(driver._driver().cuMemAlloc(self.nbytes), "cuMemAlloc"))
        self.host_copy: np.ndarray | None = None     # DriverPlane.compare's, reused trial after trial
        global _held_bytes
        _held_bytes += self.nbytes

    def data_ptr(self) -> int:
        return self.ptr

    def upload(self, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        _ck(driver._driver().cuMemcpyHtoD(self.ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def download(self, into: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(self.shape, dtype=NUMPY[self.dtype]) if into is None else into
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
        host_args, hosts, env = host_arguments(spec)
        tensors: dict[str, DeviceBuffer] = {}
        for a in spec.args:
            if a.is_tensor:
                tensors[a.name] = DeviceBuffer(self, hosts[a.name].shape, a.tensor.dtype)
                tensors[a.name].upload(hosts[a.name])
        args = [tensors[a.name] if a.is_tensor else v for a, v in zip(spec.args, host_args)]
        return args, tensors, env

    def compare(self, out: DeviceBuffer, ref: np.ndarray, atol: float, rtol: float) -> str | None:
        # into one host array per output, kept with it: a fresh one per trial (32 MiB for a 4096²
        # fp16 output) is page faults the CPU takes during the copy, on the child's critical path
        if out.host_copy is None:
            out.host_copy = np.empty(out.shape, dtype=NUMPY[out.dtype])
        return compare(out.download(into=out.host_copy), ref, out.dtype, atol, rtol)

    @staticmethod
    def clone(t: DeviceBuffer) -> DeviceBuffer:
        return t.clone()

    @staticmethod
    def copy(dst: DeviceBuffer, src: DeviceBuffer) -> None:
        dst.copy_(src)

    @staticmethod
    def host(t: DeviceBuffer) -> np.ndarray:
        return t.download()

    @property
    def launch_kw(self) -> dict[str, int]:
        """Launches go on the plane's stream: the one its events time and its graphs capture."""
        return {"stream": self.stream_handle}

    def sync(self) -> None:
        _ck(driver._driver().cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def context_ok(self) -> bool:
        """After an error on the GPU: is the context still usable (a copy there and back)?"""
        try:
            self.sync()
            probe = DeviceBuffer(self, (4,), "int32")
            probe.upload(np.arange(4, dtype=np.int32))
            ok = probe.download().tolist() == [0, 1, 2, 3]
            self.free([probe])
            return ok
        except Exception:  # noqa: BLE001 - any failure means the context is gone
            return False

    @staticmethod
    def free(buffers) -> None:
        """Free device buffers now (a warm child's finished job: its next job must not inherit them)."""
        global _held_bytes
        cu = driver._driver()
        for b in buffers:
            if b.ptr:
                _ck(cu.cuMemFree(b.ptr), "cuMemFree")
                b.ptr = 0
                b.host_copy = None
                _held_bytes -= b.nbytes

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


def free_memory() -> int:
    """Bytes free on the current context's device (what a warm child reports after each job)."""
    free, _total = _ck(driver._driver().cuMemGetInfo(), "cuMemGetInfo")
    return int(free)


def unload_modules(kernels, index: int) -> None:
    """Unload the modules that compiled kernels loaded into device `index`'s context (a finished
    job's, in a child that goes on to the next job)."""
    cu = driver._driver()
    for k in kernels:
        lf = k._loaded.pop(index, None)
        k._launchers.clear()
        if lf is not None:
            _ck(cu.cuModuleUnload(lf.module), "cuModuleUnload")


class DriverTimer(EventTimer):
    """tuner.measure's protocol (EventTimer) on a DriverPlane's stream."""

    def __init__(self, plane: DriverPlane, *, flush_l2: bool = True):
        self.plane = plane
        self.flush_buf = DeviceBuffer(plane, (L2_FLUSH_BYTES // 4,), "int32") if flush_l2 else None

    def flush(self) -> None:
        if self.flush_buf is not None:
            _ck(driver._driver().cuMemsetD32Async(self.flush_buf.ptr, 0, L2_FLUSH_BYTES // 4, self.plane.stream),
                "cuMemsetD32Async")

    def events(self, n: int) -> list:
        return self.plane.events(n)

    def record(self, ev) -> None:
        self.plane.record(ev)

    def elapsed_ms(self, start, end) -> float:
        return self.plane.elapsed_ms(start, end)

    def sync(self) -> None:
        self.plane.sync()

    def capture(self, fn, batch: int):
        cu = driver._driver()
        p = self.plane
        for _ in range(3):
            fn()
        p.sync()
        _ck(cu.cuStreamBeginCapture(p.stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
            "cuStreamBeginCapture")
        try:
            for _ in range(batch):
                fn()
        finally:
            graph = _ck(cu.cuStreamEndCapture(p.stream), "cuStreamEndCapture")
        exe = _ck(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

        def replay():
            _ck(cu.cuGraphLaunch(exe, p.stream), "cuGraphLaunch")

        def release():
            cu.cuGraphExecDestroy(exe)
            cu.cuGraphDestroy(graph)
        return replay, release
