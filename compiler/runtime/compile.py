"""`compiler.compile`: one specialization of a kernel → `CompiledKernel`, with memory and disk caches.

    ck = compiler.compile(kernel, signature={"x_ptr": "*fp32", "n": "i32"}, constexprs={"BLOCK": 1024},
                          num_warps=4, num_stages=3, target="sm_90", divisible_by_16=("x_ptr",))
    ck.asm["ptx"]; ck.metadata["shared"]; ck.launch((nblocks, 1, 1), [x, n])

The work is build.py's (front end, backend) through cache.py (keys, memory and disk); this module
takes any @jit function (or a plain one, or an @autotune/@heuristics wrapper) and is where the
tuner and the service reach the compiler's parts (docs/contracts.md).
"""
from __future__ import annotations

from ..errors import CompilationError
from .build import build_ir, compile_jit, default_target, normalize_signature, stats, _backend_compile  # noqa: F401
from .cache import (  # noqa: F401  (the tuner's compile step and the tests use these names from here)
    atomic_write, cache_dir, cache_key, canon, clear_memory_cache, compiler_source_hash, debug_mode,
    disk_enabled as _disk_enabled, memory as _memory,
)
from .jit import JITFunction
from .kernel import CompiledKernel


def _as_jit(fn):
    obj = fn
    for _ in range(8):  # Autotuner / Heuristics wrap the JITFunction in `.fn`
        if isinstance(obj, JITFunction):
            return obj
        nxt = getattr(obj, "fn", None)
        if nxt is None or nxt is obj:
            break
        obj = nxt
    if callable(fn) and hasattr(fn, "__code__"):
        return JITFunction(fn)
    raise TypeError(f"compile() needs a @jit function, got {type(fn).__name__}")


def compile(fn, signature, constexprs: dict | None = None, num_warps: int = 4, num_stages: int = 3,
            target: str | None = None, divisible_by_16=(), equal_to_1=()) -> CompiledKernel:
    """Compile one specialization of `fn` (a @jit function) for the GPU. See the module doc."""
    return compile_jit(_as_jit(fn), signature, constexprs, num_warps, num_stages, target, divisible_by_16, equal_to_1)


__all__ = ["compile", "CompiledKernel", "CompilationError", "cache_dir", "stats", "canon", "build_ir",
           "normalize_signature"]
