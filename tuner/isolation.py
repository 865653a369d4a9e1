"""Process isolation: a child process (spawned) that owns the CUDA context, and a compile pool.

`IsolatedChild` runs `target(conn, init)` in a spawned process, talking over a pipe. The target
first sends a ready message, then answers one request at a time. A request that gets no answer in
time kills the child (ChildTimeout); a child that dies (a fault, os._exit, a signal) raises
ChildCrashed. Either way `restart()` brings a fresh one up and the caller goes on.
A warm child (tuner/standby.py) starts without a job: `assign(init)` gives it one and `release()`
takes it back after the job, so that one process serves job after job.

`CompilePool` compiles configs ahead of the GPU in worker processes; a worker killed by an LLVM fatal
error breaks only the futures it held: the pool is rebuilt and the rest resubmitted.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import time
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

from tuner.settings import tuner_settings, usable_cpus


EXITING = "_exiting"   # key of an answer after which the child exits by itself
IDLE = "_idle"         # key of a warm child's first message: started, no job yet (`assign` gives one)


class ChildError(RuntimeError):
    pass


class ChildTimeout(ChildError):
    """The child did not answer in time; it has been killed."""


class ChildCrashed(ChildError):
    """The child process died (exit code in .exitcode)."""

    def __init__(self, msg: str, exitcode: int | None = None):
        super().__init__(msg)
        self.exitcode = exitcode


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class IsolatedChild:
    def __init__(self, target: Callable[[Any, Any], None], init: Any, *, start_timeout: float = 300.0):
        self.target = target
        self.init = init
        self.start_timeout = start_timeout
        self.ctx = mp.get_context("spawn")
        self.proc: mp.process.BaseProcess | None = None
        self.conn = None
        self.ready: Any = None
        self.restarts = 0
        self.warm = False          # assigned a job after starting idle (its runtime was ready)
        self.outstanding = False   # a request was sent and its answer not read

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self) -> Any:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Spawn the child without waiting for it (`wait_ready()` does): the caller can work meanwhile."""
        parent, child = self.ctx.Pipe(duplex=True)
        self.proc = self.ctx.Process(target=self.target, args=(child, self.init), daemon=True,
                                     name="blocktune-gpu-child")
        self.ready = None
        self.warm = self.outstanding = False
        self.launched_at = time.time()
        self.proc.start()
        child.close()
        self.conn = parent

    @property
    def launched(self) -> bool:
        return self.proc is not None and self.ready is None

    def assign(self, init: Any) -> None:
        """Give an idle warm child (started without a job, or released) the job `init`: it builds the
        job's state while the caller works; `wait_ready()` gets its ready message. A restart after a
        fault starts a fresh child with `init`."""
        assert self.proc is not None and self.conn is not None
        self.init = init
        self.ready = None
        self.warm = True
        self.launched_at = time.time()
        try:
            self.conn.send({"op": "init", "init": init})
        except (BrokenPipeError, OSError):
            pass      # gone meanwhile: wait_ready() says so (ChildCrashed)

    def release(self, timeout: float = 30.0) -> dict | None:
        """Take the job back from a healthy child (ready, alive, no answer pending): it frees the
        job's state and waits for the next `assign`. Its answer ({"released": True, "rss": bytes}),
        or None when it is not fit for another job (then it is killed)."""
        if not self.alive or self.ready is None or self.outstanding:
            self.kill()
            return None
        assert self.conn is not None
        self.sent_at = time.monotonic()
        self.outstanding = True
        try:
            # not send(): a child that died meanwhile must not be restarted with the finished job
            self.conn.send({"op": "release"})
            resp = self.receive(timeout)
        except (BrokenPipeError, OSError, ChildError):
            self.kill()
            return None
        if not (isinstance(resp, dict) and resp.get("released")):
            self.kill()
            return None
        return resp

    def wait_ready(self) -> Any:
        """The child's ready message (after `launch()` or `assign()`); raises ChildError if it does not
        come. A warm child's idle message, if not read yet, is passed over."""
        try:
            self.ready = self._recv(self.start_timeout, what="start-up")
            while isinstance(self.ready, dict) and self.ready.get(IDLE) and self.warm:
                self.ready = self._recv(self.start_timeout, what="start-up")
        except ChildError:
            self.kill()
            raise
        if isinstance(self.ready, dict) and self.ready.get("error"):
            self.kill()
            raise ChildError(f"child failed to start: {self.ready['error']}")
        return self.ready

    def _recv(self, timeout: float | None, what: str, shown: float | None = None) -> Any:
        assert self.conn is not None and self.proc is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = 0.5 if remaining is None else min(0.5, remaining)
            try:
                if self.conn.poll(step):
                    return self.conn.recv()
            except (EOFError, OSError):
                self.proc.join(5)
                code = self.proc.exitcode
                self.kill()
                raise ChildCrashed(f"child died during {what} ({_describe_exit(code)})", code) from None
            if not self.proc.is_alive():
                # it may have written its last answer just before exiting
                try:
                    if self.conn.poll(0):
                        return self.conn.recv()
                except (EOFError, OSError):
                    pass
                code = self.proc.exitcode
                self.kill()
                raise ChildCrashed(f"child died during {what} ({_describe_exit(code)})", code)
            if deadline is not None and time.monotonic() >= deadline:
                self.kill()
                raise ChildTimeout(f"no answer to {what} within {shown if shown is not None else timeout:.1f} s; "
                                   "child killed")

    def call(self, request: Any, timeout: float | None) -> Any:
        """Send one request and wait for its answer (at most `timeout` seconds)."""
        self.send(request)
        return self.receive(timeout)

    def send(self, request: Any) -> None:
        """Send one request without waiting (`receive()` gets the answer): the caller can work while
        the child does. One request at a time."""
        if self.launched:
            self.wait_ready()          # launched, not yet waited for
        if not self.alive:
            self.restart()
        assert self.conn is not None
        self.sent_at = time.monotonic()
        self.outstanding = True
        try:
            self.conn.send(request)
        except (BrokenPipeError, OSError):
            code = self.proc.exitcode if self.proc else None
            self.kill()
            raise ChildCrashed(f"child gone before the request ({_describe_exit(code)})", code) from None

    def receive(self, timeout: float | None) -> Any:
        """The answer to the request sent last; `timeout` counts from when it was sent."""
        if self.proc is None or self.conn is None:
            raise ChildCrashed("child gone before the answer", None)
        full = timeout
        if timeout is not None:
            timeout = max(0.0, timeout - (time.monotonic() - getattr(self, "sent_at", time.monotonic())))
        resp = self._recv(timeout, what="the request", shown=full)
        self.outstanding = False
        if isinstance(resp, dict) and resp.pop(EXITING, False):
            # the child answered and is exiting by itself (e.g. its CUDA context is poisoned):
            # wait for it, so that the next call starts a fresh one instead of racing its exit
            assert self.proc is not None
            self.proc.join(30)
            self.kill()
        return resp

    def restart(self) -> Any:
        self.kill()
        self.restarts += 1
        return self.start()

    def kill(self) -> None:
        if self.proc is not None and getattr(self.proc, "_popen", None) is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(10)
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.proc = None
        self.conn = None

    def close(self, timeout: float = 10.0) -> None:
        """Ask the child to exit (a None request), kill it if it does not (or if it never got ready)."""
        if self.alive and self.conn is not None and not self.launched:
            try:
                self.conn.send(None)
                self.proc.join(timeout)
            except (BrokenPipeError, OSError):
                pass
        self.kill()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()


class CompilerCrashed(RuntimeError):
    """A compile worker died (e.g. an LLVM fatal error) while compiling this task, alone."""


class CompileTask:
    def __init__(self, fn: Callable, args: tuple):
        self.fn, self.args = fn, args
        self.future: cf.Future | None = None
        self.generation = 0
        self.isolated = False
        self.outcome: Any = None      # its result once read (tuner/compile_queue.py)
        self.submitted_s: float | None = None   # since the run's start (tuner/compile_queue.py)

    def lost(self) -> bool:
        """True if its future died with a broken pool (or was cancelled by the rebuild)."""
        f = self.future
        if f is None or not f.done():
            return f is None
        return f.cancelled() or isinstance(f.exception(), BrokenProcessPool)


def default_compile_workers() -> int:
    """This worker's share of the host's CPUs (the CPUs it may run on, divided among the
    BLOCKTUNE_HOST_WORKERS workers of the host), less one for the GPU child; at most 8."""
    return max(1, min(8, usable_cpus() // tuner_settings().host_workers - 1))


class CompilePool:
    """A spawn-context process pool whose breakage (a worker killed by LLVM) is survivable.

    When the pool breaks, every task in flight fails with it; the task being waited for is then run
    again alone in a fresh pool: if it breaks that one too, it is the culprit (CompilerCrashed), else
    the other tasks are resubmitted and go on.
    """

    def __init__(self, workers: int | None = None):
        self.workers = workers or tuner_settings().compile_workers or default_compile_workers()
        self.ctx = mp.get_context("spawn")
        self._pool: cf.ProcessPoolExecutor | None = None
        self._pending: list[CompileTask] = []
        self.generation = 0

    def _ensure(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=self.ctx)
        return self._pool

    def start_workers(self, fn: Callable, *args) -> list[cf.Future]:
        """Start every worker now, each running `fn(*args)` once (a warm-up: imports), instead of one
        worker per submit as tasks come. The futures are not tracked (nothing is retried)."""
        pool = self._ensure()
        return [pool.submit(fn, *args) for _ in range(self.workers)]

    def submit_untracked(self, fn: Callable, *args) -> cf.Future:
        """Background work whose result nobody waits for (not retried if the pool breaks)."""
        return self._ensure().submit(fn, *args)

    def submit(self, fn: Callable, *args) -> CompileTask:
        task = CompileTask(fn, args)
        self._submit(task)
        self._pending.append(task)
        return task

    def _submit(self, task: CompileTask) -> None:
        for attempt in range(5):
            try:
                task.future = self._ensure().submit(task.fn, *task.args)
                task.generation = self.generation
                return
            except (BrokenProcessPool, OSError):
                # broken since the last look (a crashing task resubmitted just before): a fresh pool;
                # the tasks the old one held are retried when their results are asked for. OSError:
                # the executor's pipe to its dead worker closed before its management thread marked
                # it broken (submit then fails spawning a replacement: "handle is closed")
                if attempt == 4:
                    raise
                self._break()

    def _break(self, kill: bool = False) -> None:
        self.generation += 1
        if self._pool is not None and kill:
            for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
                if proc.is_alive():
                    proc.kill()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def result(self, task: CompileTask, timeout: float | None = None) -> Any:
        try:
            assert task.future is not None
            try:
                return task.future.result(timeout)
            except (BrokenProcessPool, cf.CancelledError):
                pass   # its pool broke (maybe not its fault) or was replaced: run it again, alone
            except cf.TimeoutError:
                # a compiler that hangs: its worker is killed with the pool, the others resubmitted
                self._break(kill=True)
                for other in self._pending:
                    if other is not task and (other.future is None or not other.future.done() or other.lost()):
                        self._submit(other)
                raise TimeoutError(f"compilation did not finish in {timeout:.0f} s") from None
            self._break()
            task.isolated = True
            self._submit(task)
            try:
                return task.future.result(timeout)
            except (BrokenProcessPool, cf.CancelledError):
                self._break()
                raise CompilerCrashed("the compiler process died (fatal error in the compiler or LLVM)") from None
            finally:
                for other in self._pending:
                    if other is not task and other.generation != self.generation:
                        if other.future is not None and not other.future.done():
                            cf.wait([other.future], timeout=30)
                        if other.lost():
                            self._submit(other)
        finally:
            if task in self._pending:
                self._pending.remove(task)

    def drop_pending(self) -> None:
        """Forget a finished run's tasks (a pool kept for the next run): those not started are
        cancelled, those compiling finish unread."""
        for task in self._pending:
            if task.future is not None:
                task.future.cancel()
        self._pending.clear()

    def close(self, kill: bool = False) -> None:
        """Shut the pool down; `kill`: its workers too, mid-compile (a worker stopping for good)."""
        self._break(kill=kill)
        self._pending.clear()
