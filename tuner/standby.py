"""A service worker's GPU child and compile pool, kept warm between jobs.

A job's start-up that does not depend on the job — the child importing the compiler (and torch),
creating the CUDA context (or loading the interpreter), the compile workers importing the compiler —
is paid once, when the worker registers, instead of once per job. A run (tuner.engine) takes the
idle child, gives it the job (it builds only the inputs and the reference) and compiles in the pool;
after the run the child comes back:
  - reused when healthy: alive, ready, no answer pending; it frees the job's inputs, reference and
    loaded modules (`release`) and waits for the next job;
  - else (it crashed, was killed on a timeout, exited with a poisoned CUDA context, or would not
    release) it is killed and a fresh warm child is spawned at once, starting in the background.
A run that restarts its child after a fault gets a fresh (cold) child as without a standby; that
one is released and reused the same way. The pool is the same `CompilePool` throughout: a broken
pool (a compiler killed by LLVM) is rebuilt by the pool itself.
"""
from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from typing import Callable

from tuner.child import child_main
from tuner.isolation import ChildError, CompilePool, IsolatedChild
from tuner.settings import tuner_settings

log = logging.getLogger("blocktune.tuner")


class Standby:
    def __init__(self, *, device: int = 0, interpret: bool = False, compile_workers: int | None = None):
        self.device = device
        self.interpret = interpret
        self.pool = CompilePool(compile_workers)
        self.child: IsolatedChild | None = None
        self.last_rss: int | None = None           # the child's resident memory after its last release
        self.last_device_free: int | None = None   # the device's free memory then (GPU)
        self.last_device_held: int | None = None   # the device memory the child's buffers still held then
        self._lock = threading.Lock()
        self._closed = False
        self._pool_warming = self._warm_pool()
        self._spawn()

    def _warm_pool(self) -> list[cf.Future]:
        from tuner.compile_step import prebuild_launcher, warm_up

        warming = self.pool.start_workers(warm_up, not self.interpret)
        if not self.interpret:
            # the native launcher's C build (~0.5 s on a fresh cache) before the worker registers,
            # not in the first job, where it held a compile process for 0.46-0.84 s at the start
            # (2 x H100, 21:15); the child's first launch then only loads it
            warming.append(self.pool.submit_untracked(prebuild_launcher))
        return warming

    def wait_warm(self, timeout: float = 300.0, give_up: Callable[[], bool] = lambda: False) -> float:
        """Wait until the child is idle, every compile worker has imported the compiler and the native
        launcher is built (a worker does before it registers, so that a registered worker runs its first job warm). Returns the
        seconds waited. A child that fails to start is dropped: jobs then start their own, which
        report the failure as the job's."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        child = self.child
        if child is not None:
            while child.conn is not None and not child.conn.poll(0.2) and child.alive:
                if give_up() or time.monotonic() > deadline:
                    return time.monotonic() - t0
            try:
                child.wait_ready()
            except ChildError as exc:
                log.warning("the warm GPU child did not start (%s); jobs start their own", exc)
                with self._lock:
                    if self.child is child:
                        self.child = None
        cf.wait(self._pool_warming, timeout=max(0.0, deadline - time.monotonic()))
        return time.monotonic() - t0

    def _spawn(self) -> None:
        init = {"interpret": self.interpret, "device": self.device, "torch": tuner_settings().child_torch}
        child = IsolatedChild(child_main, init, start_timeout=300)
        child.launch()
        self.child = child

    def take_child(self) -> IsolatedChild | None:
        """The idle child for a run (None when closed); the run gives it back with `give_back`."""
        with self._lock:
            if self._closed:
                return None
            child, self.child = self.child, None
        if child is not None and not child.alive:
            child.kill()
            return None
        return child

    def give_back(self, child: IsolatedChild | None) -> None:
        """After a run: keep the child if it releases its job cleanly, else replace it."""
        released = child.release() if child is not None else None
        with self._lock:
            if self._closed:
                if child is not None:
                    child.close()
                return
            if released is not None and self.child is None:
                self.child = child
                self.last_rss = released.get("rss")
                self.last_device_free = released.get("device_free")
                self.last_device_held = released.get("device_held")
                return
        if child is not None:
            log.info("the GPU child is not fit for another job: starting a fresh one")
            child.kill()
        with self._lock:
            if self.child is None and not self._closed:
                self._spawn()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            child, self.child = self.child, None
        if child is not None:
            child.close()
        self.pool.close(kill=True)      # nothing compiling now is wanted: no process outlives the worker
