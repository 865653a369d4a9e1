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

import logging
import threading

from tuner.child import child_main
from tuner.isolation import CompilePool, IsolatedChild
from tuner.settings import tuner_settings

log = logging.getLogger("blocktune.tuner")


class Standby:
    def __init__(self, *, device: int = 0, interpret: bool = False, compile_workers: int | None = None):
        self.device = device
        self.interpret = interpret
        self.pool = CompilePool(compile_workers)
        self.child: IsolatedChild | None = None
        self.last_rss: int | None = None           # the child's resident memory after its last release
        self._lock = threading.Lock()
        self._closed = False
        self._warm_pool()
        self._spawn()

    def _warm_pool(self) -> None:
        from tuner.compile_step import warm_up

        self.pool.start_workers(warm_up)

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
        self.pool.close()
