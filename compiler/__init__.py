"""blocktune's compiler: a Triton-compatible block-level GPU kernel compiler.

    import compiler as triton
    import compiler.language as tl

Importing this package is cheap: no CUDA, no torch and no LLVM are loaded until a kernel is
compiled or launched.
"""
from __future__ import annotations

from .version import __version__

from . import language  # noqa: E402
from .errors import AutotunerError, CompilationError, CompileTimeAssertionFailure, OutOfResources, TritonError  # noqa: E402
from . import runtime  # noqa: E402
from .runtime.jit import JITFunction, constexpr_function, jit  # noqa: E402
from .runtime.autotune import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: E402
from .runtime.compile import ASTSource, CompiledKernel, compile  # noqa: E402
from .runtime.source import jit_from_source  # noqa: E402
from .runtime.allocator import set_allocator  # noqa: E402
from .runtime.tensor_wrapper import TensorWrapper, reinterpret  # noqa: E402
from . import testing  # noqa: E402
from .language.core import must_use_result  # noqa: E402


def cdiv(x: int, y: int) -> int:
    """Ceiling division: `cdiv(10, 4) == 3`."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    n = int(n)
    if n <= 1:
        return 1
    return 1 << (n - 1).bit_length()


# The front end may call these on compile-time values inside kernels.
cdiv.__blocktune_host_helper__ = True
next_power_of_2.__blocktune_host_helper__ = True

__all__ = ["jit", "constexpr_function", "JITFunction", "autotune", "heuristics", "Config", "Autotuner", "Heuristics",
           "compile", "ASTSource", "CompiledKernel", "jit_from_source", "TensorWrapper", "reinterpret", "cdiv", "next_power_of_2",
           "CompilationError", "OutOfResources", "TritonError", "AutotunerError", "CompileTimeAssertionFailure",
           "testing", "language", "runtime", "set_allocator", "must_use_result", "__version__"]
