"""The runtime: @jit kernels, compilation and caches, the CUDA driver, autotuning.

`compiler.runtime.compile` and `compiler.runtime.jit` are the modules (as `triton.runtime.jit`);
the function and the decorator are `compiler.compile` and `compiler.jit`. Submodules are light to import; CUDA, torch and LLVM load only when used.
"""
from __future__ import annotations

from . import driver  # noqa: F401
from . import compile  # noqa: F401  (the module, on purpose)
from . import jit  # noqa: F401  (the module, as triton.runtime.jit; the decorator is compiler.jit)
from .jit import JITFunction  # noqa: F401
from .compile import CompiledKernel  # noqa: F401
from .autotune import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: F401
from .source import jit_from_source  # noqa: F401

__all__ = ["driver", "compile", "jit", "JITFunction", "CompiledKernel", "Autotuner", "Config", "Heuristics",
           "autotune", "heuristics", "jit_from_source"]
