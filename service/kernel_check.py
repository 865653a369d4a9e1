"""Submission checks in warm checker processes with hard limits: the API process never compiles.

`tuner.submission.prepare_submission` (the compiler's front end and the safe evaluator: nothing
submitted is executed) runs in one of a few long-lived checker processes, started on the first
submission (or at app start with `kernel_check_prewarm`), each of which has imported the compiler
and checked a small kernel once, so that a check costs no imports. Every check is limited:

- CPU time (RLIMIT_CPU): before each check the soft limit is set to the CPU the process has used so
  far plus the limit; past it the kernel sends SIGXCPU, whose default action ends the process —
  also inside C code, where no Python handler would run;
- memory (RLIMIT_AS, the process's address space, set once its imports are done);
- wall-clock time: the API kills (SIGKILL) a checker that has not answered in time.

A checker that dies or runs out of memory is replaced by a fresh one at the next check. The check
answers 422 with the limit it hit. At most `workers` checks run at once, on threads of this module's
own pool (each blocked on its checker's pipe: never the event loop, never Starlette's threadpool); up
to `queue` more wait, and beyond that a submission is refused at once (`CheckerBusy`: 503 with
Retry-After) instead of waiting behind hostile ones, as is one that waited `queue_wait_seconds`.
Checkers run at a lower CPU priority (`nice`) than the API, so that lookups keep answering while
they work. `/metrics` shows the checks under way and their outcomes (the checker is a collector).

The API and a checker exchange JSON over two pipes (never pickle: the API does not unpickle what a
process that parsed hostile input sends); a checker's stdout is /dev/null (`tl.static_print`).
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

MAX_REPLY_BYTES = 64 << 20
LOC = ("kernel", "source")     # where a limit's 422 points: the kernel's compile-time work hit it


class CheckRejected(Exception):
    """The submission is invalid (a 422): `errors` as [{"loc": [...], "msg": str, "type": str}]."""

    def __init__(self, errors: list[dict[str, Any]]):
        self.errors = errors
        super().__init__("; ".join(e["msg"] for e in errors))


class CheckerBusy(Exception):
    """No checker can take the submission now (a 503); retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int):
        self.retry_after = retry_after
        super().__init__(message)


def _rejected(msg: str) -> CheckRejected:
    return CheckRejected([{"loc": list(LOC), "msg": msg, "type": "value_error"}])


@dataclasses.dataclass(frozen=True)
class CheckLimits:
    cpu_seconds: int = 10
    memory_mb: int = 1024
    timeout_seconds: float = 20.0
    nice: int = 10


class _Checker:
    """One checker process and its two pipes."""

    def __init__(self, limits: CheckLimits, start_timeout: float):
        self.limits = limits
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = dict(os.environ)
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"       # numpy's thread pools would reserve address space for nothing
        # the same interpreter, environment and working directory as the API; this very code's
        # directory last on the path, for an API started from elsewhere than a checkout or an install
        main = (f"import sys; sys.path.append({str(Path(__file__).resolve().parents[1])!r}); "
                f"from service.kernel_check import _child_main; "
                f"_child_main({req_r}, {rep_w}, {limits.memory_mb << 20}, {limits.nice})")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", main],
                pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                start_new_session=True)
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.requests = Connection(req_w, readable=False)
        self.replies = Connection(rep_r, writable=False)
        try:
            ready = self._receive(start_timeout, "start")
        except CheckRejected as exc:
            raise RuntimeError(f"the kernel checker did not start: {exc}") from None
        if "ready" not in ready:
            self.kill()
            raise RuntimeError(f"the kernel checker did not start: {ready.get('error', ready)}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def check(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The checker's reply to `spec`; raises CheckRejected when a limit ends the check,
        BrokenPipeError when the checker was gone before it."""
        self.requests.send_bytes(json.dumps({"spec": spec, "cpu_seconds": self.limits.cpu_seconds}).encode())
        return self._receive(self.limits.timeout_seconds, "check")

    def _receive(self, timeout: float, what: str) -> dict[str, Any]:
        try:
            if not self.replies.poll(timeout):
                self.kill()
                raise _rejected(f"kernel check exceeded its time limit of {timeout:g} s" if what == "check"
                                else f"no answer within {timeout:g} s")
            return json.loads(self.replies.recv_bytes(MAX_REPLY_BYTES))
        except (EOFError, OSError, ValueError):
            try:
                code = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            self.kill()
            raise _rejected(self._death(code)) from None

    def _death(self, code: int | None) -> str:
        if code == -signal.SIGXCPU:
            return f"kernel check exceeded its CPU-time limit of {self.limits.cpu_seconds} s"
        if code == -signal.SIGKILL:
            return ("kernel check was killed (SIGKILL: the machine's out-of-memory killer?); its memory "
                    f"limit is {self.limits.memory_mb} MiB")
        if code is not None and code < 0:
            try:
                return f"kernel check process died ({signal.Signals(-code).name})"
            except ValueError:
                pass
        return f"kernel check process died (exit code {code})"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        for conn in (self.requests, self.replies):
            try:
                conn.close()
            except OSError:
                pass


class KernelChecker:
    """The pool of checker processes of one app (see the module doc)."""

    def __init__(self, *, workers: int = 2, queue: int = 8, limits: CheckLimits = CheckLimits(),
                 queue_wait_seconds: float = 30.0, start_timeout: float = 120.0):
        self.workers = workers
        self.queue = queue
        self.limits = limits
        self.queue_wait_seconds = queue_wait_seconds
        self.start_timeout = start_timeout
        self.retry_after = max(1, math.ceil(limits.timeout_seconds))
        self._executor = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernel-check")
        self._lock = threading.Lock()
        self._idle: list[_Checker] = []
        self._all: set[_Checker] = set()
        self._pending = 0
        self._closed = False
        self._outcomes = {"accepted": 0, "rejected": 0, "over_limit": 0, "busy": 0, "cancelled": 0}

    @classmethod
    def from_settings(cls, settings) -> "KernelChecker":
        return cls(workers=settings.kernel_check_workers, queue=settings.kernel_check_queue,
                   limits=CheckLimits(cpu_seconds=settings.kernel_check_cpu_seconds,
                                      memory_mb=settings.kernel_check_memory_mb,
                                      timeout_seconds=settings.kernel_check_timeout_seconds,
                                      nice=settings.kernel_check_nice),
                   queue_wait_seconds=settings.kernel_check_queue_wait_seconds)

    # -- the API's side --------------------------------------------------------------------------
    async def check(self, spec: dict[str, Any]):
        """The `tuner.submission.Submission` of `spec`; raises CheckRejected (422) or CheckerBusy (503)."""
        return await asyncio.wrap_future(self.submit(spec))

    def submit(self, spec: dict[str, Any]) -> cf.Future:
        with self._lock:
            if self._closed:
                raise CheckerBusy("the service is shutting down", self.retry_after)
            if self._pending >= self.workers + self.queue:
                self._outcomes["busy"] += 1
                raise CheckerBusy(f"all {self.workers} kernel checkers are busy and {self.queue} submissions wait; "
                                  "retry later", self.retry_after)
            self._pending += 1
        fut = self._executor.submit(self._run, spec, time.monotonic())
        fut.add_done_callback(self._done)
        return fut

    def _done(self, fut: cf.Future) -> None:
        exc = None if fut.cancelled() else fut.exception()
        outcome = "cancelled" if fut.cancelled() else "accepted" if exc is None else \
            "busy" if isinstance(exc, CheckerBusy) else \
            "over_limit" if isinstance(exc, CheckRejected) and exc.errors[0]["msg"].startswith("kernel check ") \
            else "rejected"
        with self._lock:
            self._pending -= 1
            self._outcomes[outcome] += 1

    def collect(self):
        """Prometheus: checks under way (running or waiting), checker processes, outcomes."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            pending, processes, outcomes = self._pending, len(self._all), dict(self._outcomes)
        yield GaugeMetricFamily("blocktune_kernel_checks_pending", "Submission checks running or waiting",
                                value=pending)
        yield GaugeMetricFamily("blocktune_kernel_checkers", "Kernel checker processes", value=processes)
        done = CounterMetricFamily("blocktune_kernel_checks", "Submission checks by outcome", labels=["outcome"])
        for k, v in outcomes.items():
            done.add_metric([k], v)
        yield done

    def start(self) -> None:
        """Start the checker processes now, in the background (the first submissions then find them warm)."""
        for _ in range(self.workers):
            self._executor.submit(self._warm)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            everyone = list(self._all)
            self._idle.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)
        for c in everyone:
            c.kill()

    # -- a check, on one of the pool's threads ---------------------------------------------------
    def _run(self, spec: dict[str, Any], queued_at: float):
        from tuner.submission import Submission

        waited = time.monotonic() - queued_at
        if waited > self.queue_wait_seconds:
            raise CheckerBusy(f"no kernel checker was free for {waited:.0f} s; retry later", self.retry_after)
        for attempt in (1, 2):
            checker = self._take()
            try:
                reply = checker.check(spec)
            except BrokenPipeError:     # it died while idle (not this submission's doing): another one
                self._drop(checker)
                if attempt == 2:
                    raise CheckerBusy("the kernel checker is not working; retry later", self.retry_after) from None
                continue
            except BaseException:
                self._drop(checker)
                raise
            break
        if reply.get("exit"):
            self._drop(checker)
        else:
            self._put(checker)
        if "ok" in reply:
            return Submission(**reply["ok"])
        if reply.get("memory"):
            raise _rejected(f"kernel check exceeded its memory limit of {self.limits.memory_mb} MiB")
        raise CheckRejected(reply["invalid"])

    def _warm(self) -> None:
        try:
            self._put(self._take())
        except Exception:  # noqa: BLE001 - the first check tries again and reports it
            pass

    def _take(self) -> _Checker:
        with self._lock:
            while self._idle:
                c = self._idle.pop()
                if c.alive:
                    return c
                self._all.discard(c)
                c.kill()
            if self._closed:
                raise CheckerBusy("the service is shutting down", self.retry_after)
        try:
            c = _Checker(self.limits, self.start_timeout)
        except (RuntimeError, OSError) as exc:
            raise CheckerBusy(f"{exc}; retry later", self.retry_after) from None
        with self._lock:
            self._all.add(c)
            if self._closed:
                c.kill()
                raise CheckerBusy("the service is shutting down", self.retry_after)
        return c

    def _put(self, c: _Checker) -> None:
        with self._lock:
            if not self._closed and c.alive:
                self._idle.append(c)
                return
        self._drop(c)

    def _drop(self, c: _Checker) -> None:
        with self._lock:
            self._all.discard(c)
        c.kill()


# -- the checker process ---------------------------------------------------------------------------
_WARM_UP_SPEC = {
    "kernel": {"name": "add_kernel", "source": (
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):\n"
        "    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
        "    mask = offsets < n_elements\n"
        "    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),"
        " mask=mask)\n")},
    "sizes": {"N": 4096},
    "args": [{"name": "x_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "rand"}},
             {"name": "y_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "rand"}},
             {"name": "out_ptr", "tensor": {"shape": ["N"], "dtype": "float32", "init": "zeros"}},
             {"name": "n_elements", "value": "numel(x_ptr)"}],
    "key": ["n_elements"], "grid": ["cdiv(n_elements, BLOCK_SIZE)"],
    "space": {"BLOCK_SIZE": [64, 1024], "num_warps": [1, 4]},
}


def _check(spec: Any) -> dict[str, Any]:
    from pydantic import ValidationError

    from tuner.submission import SubmissionError, prepare_submission

    try:
        return {"ok": dataclasses.asdict(prepare_submission(spec))}
    except ValidationError as exc:
        return {"invalid": [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
                            for e in exc.errors(include_url=False)]}
    except SubmissionError as exc:
        return {"invalid": [{"loc": list(exc.loc), "msg": exc.message, "type": "value_error"}]}
    except MemoryError:
        return {"memory": True, "exit": True}     # and start afresh
    except Exception as exc:  # noqa: BLE001 - our checks failing on this input: still the input's 422
        return {"invalid": [{"loc": list(LOC), "msg": f"kernel check failed: {type(exc).__name__}: {exc}",
                             "type": "value_error"}], "exit": True}


def _limit_cpu(seconds: int) -> None:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime) + seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _child_main(req_fd: int, rep_fd: int, memory_bytes: int, nice: int) -> None:
    import resource
    import warnings

    warnings.simplefilter("ignore")        # SyntaxWarnings of hostile source would fill the API's log
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))     # SIGXCPU ends the process: no core file
    if nice:
        os.nice(nice)
    requests = Connection(req_fd, writable=False)
    replies = Connection(rep_fd, readable=False)
    try:
        _serve_checks(requests, replies, memory_bytes)
    except BrokenPipeError:      # the API closed the pipe (it stopped, e.g. while this one warmed up)
        return


def _serve_checks(requests: Connection, replies: Connection, memory_bytes: int) -> None:
    import resource

    warm = _check(_WARM_UP_SPEC)
    if "ok" not in warm:
        replies.send_bytes(json.dumps({"error": f"the warm-up check failed: {warm}"}).encode())
        return
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    replies.send_bytes(json.dumps({"ready": os.getpid()}).encode())
    while True:
        try:
            request = json.loads(requests.recv_bytes())
        except EOFError:        # the API closed the pipe (or is gone)
            return
        _limit_cpu(int(request["cpu_seconds"]))
        reply = _check(request["spec"])
        replies.send_bytes(json.dumps(reply).encode())
        if reply.get("exit"):
            return
