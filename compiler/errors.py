"""Errors raised by the compiler: `CompilationError` (with a source location), `OutOfResources` and
`AutotunerError`, all `TritonError`s as in Triton."""
from __future__ import annotations

_SHOWN_CHARS = 160     # of a long source line, the error shows this much around the column


class TritonError(Exception):
    """The base of the compiler's own errors (Triton's `triton.TritonError`)."""


class ArgumentError(ValueError, AssertionError):
    """A wrong argument to a compiler or tool API (num_warps=3, an out-of-range dim). Also an
    AssertionError: Triton checks these with `assert`, and code written for it catches that."""


class CompilationError(TritonError):
    """A kernel could not be compiled. `str()` reads like a C compiler diagnostic:

        file.py:12:9: error: <message>
            x = tl.load(p + offs, mask=m)
                ^
    """

    def __init__(self, message: str, loc=None, source_line: str | None = None):
        self.message = str(message)
        self.loc = loc
        self.source_line = source_line
        super().__init__(self._format())

    def _format(self) -> str:
        head = f"{self.loc}: error: {self.message}" if self.loc is not None else f"error: {self.message}"
        if not self.source_line:
            return head
        line = self.source_line.rstrip("\n")
        text = line.lstrip()
        indent = len(line) - len(text)
        col = getattr(self.loc, "col", None)
        caret = col - indent if isinstance(col, int) and col >= indent else None
        if len(text) > _SHOWN_CHARS:   # a huge line (hostile source): the part around the column
            start = max(0, min(caret or 0, len(text)) - _SHOWN_CHARS // 2)
            shown = text[start:start + _SHOWN_CHARS]
            prefix = "..." if start else ""
            text = prefix + shown + ("..." if start + _SHOWN_CHARS < len(text) else "")
            if caret is not None:
                caret = caret - start + len(prefix)
        out = f"{head}\n    {text}"
        if caret is not None:
            out += "\n    " + " " * caret + "^"
        return out

    def __str__(self) -> str:
        return self._format()

    @property
    def error_message(self) -> str:
        """The message without the location (Triton's attribute)."""
        return self.message

    def __reduce__(self):  # picklable across process pools (the tuner compiles in children)
        return (type(self), (self.message, self.loc, self.source_line))


class CompileTimeAssertionFailure(CompilationError):
    """A `tl.static_assert` (or an `assert` on compile-time values) failed (Triton's name)."""


class OutOfResources(TritonError):
    """The kernel needs more shared memory / registers / threads than the device offers."""

    def __init__(self, required: int, limit: int, name: str = "shared memory"):
        self.required, self.limit, self.name = required, limit, name
        super().__init__(f"out of resource: {name}, Required: {required}, Hardware limit: {limit}. "
                         "Reducing block sizes or `num_stages` may help.")   # Triton's words

    def __reduce__(self):
        return (type(self), (self.required, self.limit, self.name))


class AutotunerError(TritonError):
    """@autotune was set up so that it cannot pick a config (e.g. pruning left none)."""

    def __init__(self, message: str):
        self.message = str(message)
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"Autotuner error: {self.message}"

    def __reduce__(self):
        return (type(self), (self.message,))
