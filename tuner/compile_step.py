"""What the compile pool runs: one config of one kernel, in a worker process.

GPU mode: `compiler.compile` to PTX for the device's target (cached on disk by the compiler), the
shared-memory check against the device's limit, and — when the engine hands a `ptxas` — the PTX
assembled to a cubin here, in parallel across the pool, so that the GPU child's module load is a
cheap cubin load instead of the driver's JIT of the PTX (100+ ms for a big wgmma matmul), serial
on the child. The cubin is kept in the compiler's disk cache next to the kernel's JSON (what
`BLOCKTUNE_PTXAS_AOT=1` does), so a warm cache skips ptxas too. Interpret mode: the compiler's
front end (source → block IR for this specialization), which is what the interpreter will run;
type errors and bad constexprs surface here, ahead of the child.

Returns a dict, never raises for a config's own failure: {"status": "ok", "compiled": CompiledKernel
| None, "shared": int | None, "compile_s": float, "ptxas_s": float, "cubin_error": str | None} or
{"status": "compile-error" | "invalid", "error": str, ...}. The CompiledKernel shipped back keeps
only what loading needs (the PTX, the cubin when there is one, the metadata): the LLVM IR (up to
1.3 MB per matmul config) would be pickled to the parent and on to the child for nothing.

`select_ptxas(driver_cuda_version)` (in the parent, once) picks the ptxas the pool uses.

Priority: a pool worker runs BLOCKTUNE_COMPILE_NICE (default 5) below the worker's CPU priority
(tuner/settings.py says why).

Limits: a hostile kernel that reaches a worker (its front end refuses absurd compile-time work
itself) must fail its trial, not take the worker down. A pool worker's address space is limited
(RLIMIT_AS, `BLOCKTUNE_COMPILE_MEMORY_MB`, default 8192; 0: none) and each compile's CPU time
(RLIMIT_CPU, `BLOCKTUNE_COMPILE_CPU_S`, default 300; 0: none): past it SIGXCPU raises
`CompileCPULimit` in the compile, which becomes the config's compile-error, and the worker goes on.
Time spent inside C++ (LLVM) is ended by the engine's per-compile wall-clock timeout
(`measure.compile_timeout_s`), which replaces the worker.
"""
from __future__ import annotations

import functools
import math
import os
import resource
import signal
import time
from typing import Any

from compiler import ptxas as assembler
from tuner.settings import tuner_settings

MEMORY_ENV = "BLOCKTUNE_COMPILE_MEMORY_MB"    # named in the errors a limit gives (tuner/settings.py)
CPU_ENV = "BLOCKTUNE_COMPILE_CPU_S"


class CompileCPULimit(BaseException):
    """Raised in a compile that used up its CPU time (not an Exception: nothing on the way swallows it)."""


def memory_limit_mb() -> int:
    return tuner_settings().compile_memory_mb


def cpu_limit_s() -> int:
    return tuner_settings().compile_cpu_s


def _on_sigxcpu(signum, frame):
    raise CompileCPULimit()


def _limit_memory() -> None:
    """This worker's address space (once; the soft limit only, so that it can be changed again)."""
    mb = memory_limit_mb()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = (mb << 20) if mb else hard
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if want != soft:
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))


class _cpu_budget:
    """RLIMIT_CPU's soft limit at the CPU used so far plus the budget, for one compile."""

    def __enter__(self):
        self.seconds = cpu_limit_s()
        self.soft, self.hard = resource.getrlimit(resource.RLIMIT_CPU)
        if self.seconds:
            self.handler = signal.signal(signal.SIGXCPU, _on_sigxcpu)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            soft = math.ceil(usage.ru_utime + usage.ru_stime) + self.seconds
            if self.hard != resource.RLIM_INFINITY:
                soft = min(soft, self.hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, self.hard))
        return self

    def __exit__(self, *exc):
        if self.seconds:
            resource.setrlimit(resource.RLIMIT_CPU, (self.soft, self.hard))
            signal.signal(signal.SIGXCPU, self.handler)
        return False


@functools.lru_cache(maxsize=8)
def _kernel(source: str, name: str):
    import compiler

    return compiler.jit_from_source(source, name)


def _slim(ck):
    """A copy of `ck` with what loading and launching need (PTX, cubin, metadata)."""
    from compiler.runtime.compile import CompiledKernel

    asm = {k: v for k, v in ck.asm.items() if k in ("ptx", "cubin")}
    return CompiledKernel(ck.name, asm, dict(ck.metadata))


def _add_cubin(ck, exe: str) -> tuple[float, str | None]:
    """Assemble `ck`'s PTX into ck.asm["cubin"] (and the disk cache). Returns (seconds, error)."""
    if ck.asm.get("cubin"):
        return 0.0, None            # from the disk cache
    t = time.perf_counter()
    try:
        cubin = assembler.assemble(ck.asm["ptx"], str(ck.metadata.get("target")), exe=exe)
    except Exception as exc:  # noqa: BLE001 - the PTX still works: the driver JITs it
        return time.perf_counter() - t, f"{type(exc).__name__}: {exc}"
    ck.asm["cubin"] = cubin
    key = ck.metadata.get("cache_key")
    try:
        from compiler.runtime import compile as rc

        if key and rc._disk_enabled():
            rc.atomic_write(os.path.join(rc.cache_dir(), key[:2], key + ".cubin"), cubin)
    except Exception:  # noqa: BLE001 - a cache we cannot write is only slower
        pass
    return time.perf_counter() - t, None


def compile_config(source: str, name: str, signature: dict[str, str], constexprs: dict[str, Any],
                   num_warps: int, num_stages: int, target: str | None, divisible_by_16: tuple[str, ...],
                   equal_to_1: tuple[str, ...], max_shared: int | None, interpret: bool,
                   ptxas: str | None = None) -> dict[str, Any]:
    import compiler

    t0 = time.perf_counter()
    timing = lambda: {"compile_s": time.perf_counter() - t0}  # noqa: E731
    _limit_memory()
    _lower_priority()
    try:
        with _cpu_budget():
            return _compile(compiler, source, name, signature, constexprs, num_warps, num_stages, target,
                            divisible_by_16, equal_to_1, max_shared, interpret, ptxas, timing)
    except CompileCPULimit:
        return {"status": "compile-error", "error": f"compilation exceeded its CPU-time limit of {cpu_limit_s()} s "
                                                    f"({CPU_ENV})", **timing()}
    except MemoryError:
        return {"status": "compile-error", "error": f"compilation exceeded the compile worker's memory limit of "
                                                    f"{memory_limit_mb()} MiB ({MEMORY_ENV})", **timing()}


def _compile(compiler, source, name, signature, constexprs, num_warps, num_stages, target, divisible_by_16,
             equal_to_1, max_shared, interpret, ptxas, timing) -> dict[str, Any]:
    try:
        fn = _kernel(source, name)
        if interpret:
            from compiler.runtime import compile as rc

            rc.build_ir(fn, rc.normalize_signature(fn, signature, constexprs), constexprs,
                        divisible_by_16, equal_to_1)
            return {"status": "ok", "compiled": None, "shared": None, **timing()}
        ck = compiler.compile(fn, signature=signature, constexprs=constexprs, num_warps=num_warps,
                              num_stages=num_stages, target=target, divisible_by_16=divisible_by_16,
                              equal_to_1=equal_to_1)
        shared = int(ck.metadata.get("shared", 0) or 0)
        if max_shared and shared > max_shared:
            return {"status": "invalid", "shared": shared,
                    "error": str(compiler.OutOfResources(shared, max_shared, "shared memory")), **timing()}
        ptxas_s, cubin_error = (0.0, None)
        if ptxas:
            ptxas_s, cubin_error = _add_cubin(ck, ptxas)
        return {"status": "ok", "compiled": _slim(ck), "shared": shared, "ptxas_s": ptxas_s,
                "cubin_error": cubin_error, **timing()}
    except compiler.OutOfResources as exc:
        return {"status": "invalid", "error": f"OutOfResources: {exc}", **timing()}
    except compiler.CompilationError as exc:
        return {"status": "compile-error", "error": f"CompilationError: {exc}", **timing()}
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - a compiler bug on this config is this config's failure
        return {"status": "compile-error", "error": f"{type(exc).__name__}: {exc}", **timing()}


_lowered = False


def _lower_priority() -> None:
    """This compile process's CPU priority, BLOCKTUNE_COMPILE_NICE below the worker's (once): the
    compiles run ahead of the GPU, the child's checks and the parent's bookkeeping do not."""
    global _lowered
    if _lowered:
        return
    _lowered = True
    step = tuner_settings().compile_nice
    if step:
        try:
            os.nice(step)
        except OSError:       # not allowed here: the same priority as the worker
            pass


def warm_up(backend: bool = False) -> bool:
    """Import the compiler in a pool worker while the GPU child starts (its memory limit and its
    priority set first). `backend` (GPU mode): also the code generator and LLVM with its NVPTX
    target, which a first compile would otherwise import and initialize (63 modules, ~0.15 s of
    CPU), on every worker's first job's critical path."""
    _limit_memory()
    _lower_priority()
    import compiler  # noqa: F401

    if backend:
        from compiler.backend import llvm_target, nvptx  # noqa: F401

        llvm_target.target_machine()
    return True


def prebuild_launcher() -> float:
    """Build the compiler's native launcher module (a C compile, once per cache directory: ~0.5 s)
    in the pool while the GPU child starts, so that the child's first launch only loads it.
    Returns the seconds spent (0 when it was built already or cannot be)."""
    t = time.perf_counter()
    try:
        from compiler.runtime import native

        native.module()
    except Exception:  # noqa: BLE001 - the child builds it (or uses ctypes) as before
        pass
    return time.perf_counter() - t


# --- which ptxas --------------------------------------------------------------------------------

def select_ptxas(driver_cuda_version: str | None = None) -> str | None:
    """The ptxas whose cubins this driver loads (compiler.ptxas.for_driver), or None: then the tuner
    ships PTX — also with `BLOCKTUNE_TUNER_CUBIN=0`. The GPU child falls back to the PTX anyway if a
    cubin does not load."""
    if not tuner_settings().tuner_cubin:
        return None
    return assembler.for_driver(driver_cuda_version)
