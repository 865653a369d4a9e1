"""The runtime: @jit kernels, compilation and caches, the CUDA driver, autotuning.

`compiler.runtime.compile`, `.jit` and `.autotune` are the modules (as `triton.runtime.jit`); the
function and the decorators are `compiler.compile`, `compiler.jit` and `compiler.autotune`. Submodules are light to import; CUDA, torch and LLVM load only when used.
"""
from __future__ import annotations

from . import driver  # noqa: F401
from . import compile  # noqa: F401  (the module, on purpose)
from . import jit  # noqa: F401  (the module, as triton.runtime.jit; the decorator is compiler.jit)
from .jit import JITFunction  # noqa: F401
from .compile import CompiledKernel  # noqa: F401
from . import autotune  # noqa: F401  (the module; the decorator is compiler.autotune)
from .autotune import Autotuner, Config, Heuristics, heuristics  # noqa: F401
from .source import jit_from_source  # noqa: F401
from ..errors import AutotunerError, OutOfResources  # noqa: F401  (as triton.runtime's)

__all__ = ["driver", "compile", "jit", "autotune", "JITFunction", "CompiledKernel", "Autotuner", "Config",
           "Heuristics", "heuristics", "jit_from_source", "AutotunerError", "OutOfResources"]
