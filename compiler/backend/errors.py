"""The backend's error: it cannot lower this IR (an unsupported op/type combination)."""
from __future__ import annotations

import linecache

from ..errors import CompilationError


class BackendError(CompilationError):
    """A `compiler.CompilationError` raised by the NVPTX backend, with the op's source location."""

    def __init__(self, message, loc=None, source_line=None, *rest):
        if loc is not None and getattr(loc, "line", 0) <= 0:
            loc = None  # ir.UNKNOWN_LOC
        if source_line is None and loc is not None and getattr(loc, "file", None):
            source_line = linecache.getline(loc.file, loc.line) or None
        super().__init__(message, loc, source_line, *rest)
