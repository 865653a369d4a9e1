"""What the compile pool runs: one config of one kernel, in a worker process.

GPU mode: `compiler.compile` to PTX for the device's target (cached on disk by the compiler), and
the shared-memory check against the device's limit. Interpret mode: the compiler's front end
(source → block IR for this specialization), which is what the interpreter will run; type errors
and bad constexprs surface here, ahead of the child.

Returns a dict, never raises for a config's own failure: {"status": "ok", "compiled": CompiledKernel
| None, "shared": int | None} or {"status": "compile-error" | "invalid", "error": str}.
"""
from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=8)
def _kernel(source: str, name: str):
    import compiler

    return compiler.jit_from_source(source, name)


def compile_config(source: str, name: str, signature: dict[str, str], constexprs: dict[str, Any],
                   num_warps: int, num_stages: int, target: str | None, divisible_by_16: tuple[str, ...],
                   equal_to_1: tuple[str, ...], max_shared: int | None, interpret: bool) -> dict[str, Any]:
    import compiler

    try:
        fn = _kernel(source, name)
        if interpret:
            from compiler.runtime import compile as rc

            rc.build_ir(fn, rc.normalize_signature(fn, signature, constexprs), constexprs,
                        divisible_by_16, equal_to_1)
            return {"status": "ok", "compiled": None, "shared": None}
        ck = compiler.compile(fn, signature=signature, constexprs=constexprs, num_warps=num_warps,
                              num_stages=num_stages, target=target, divisible_by_16=divisible_by_16,
                              equal_to_1=equal_to_1)
        shared = int(ck.metadata.get("shared", 0) or 0)
        if max_shared and shared > max_shared:
            return {"status": "invalid", "shared": shared,
                    "error": str(compiler.OutOfResources(shared, max_shared, "shared memory"))}
        return {"status": "ok", "compiled": ck, "shared": shared}
    except compiler.OutOfResources as exc:
        return {"status": "invalid", "error": f"OutOfResources: {exc}"}
    except compiler.CompilationError as exc:
        return {"status": "compile-error", "error": f"CompilationError: {exc}"}
    except Exception as exc:  # noqa: BLE001 - a compiler bug on this config is this config's failure
        return {"status": "compile-error", "error": f"{type(exc).__name__}: {exc}"}


def warm_up() -> bool:
    """Import the compiler in a pool worker while the GPU child starts."""
    import compiler  # noqa: F401

    return True
