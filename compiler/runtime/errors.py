"""The runtime's errors under Triton's module path (`triton.runtime.errors`), for code that catches
them by that name: `InterpreterError` (a kernel cannot run in interpret mode) and `OutOfResources`
(a kernel needs more shared memory or registers than the GPU has)."""
from __future__ import annotations

from ..errors import AutotunerError, OutOfResources
from ..interpreter.values import InterpreterError

__all__ = ["AutotunerError", "InterpreterError", "OutOfResources"]
