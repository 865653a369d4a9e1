"""Errors raised by the compiler: `CompilationError` (with a source location), `OutOfResources` and
`AutotunerError`, all `TritonError`s as in Triton."""
from __future__ import annotations

from dataclasses import dataclass

_SHOWN_CHARS = 160     # of a long source line, the error shows this much around the column
_SHOWN_CALLS = 6       # of a deep chain of @jit calls, the error shows the outermost and innermost few


class TritonError(Exception):
    """The base of the compiler's own errors (Triton's `triton.TritonError`)."""


class ArgumentError(ValueError, AssertionError):
    """A wrong argument to a compiler or tool API (num_warps=3, an out-of-range dim). Also an
    AssertionError: Triton checks these with `assert`, and code written for it catches that."""


@dataclass(frozen=True)
class SourceNode:
    """Where in a @jit function's own source (`CompilationError.src`) an error is, in Triton's
    coordinates (its `CompilationError.node`): line 1 is the `def` line, columns count from 0 in
    the dedented source."""
    lineno: int
    col_offset: int


class CompilationError(TritonError):
    """A kernel could not be compiled. `str()` starts like a C compiler diagnostic, then shows the
    @jit function's source up to the offending line in Triton's layout ("at line:col:" of the
    function's own source, a caret under the column, the message last):

        file.py:12:9: error: <message>
        file.py:12:9: in kernel() at 3:8:
        def kernel(x_ptr, ...):
            offs = tl.arange(0, BLOCK)
            x = tl.load(p + offs, mask=m)
                ^
        <message>

    An error inside a called @jit function is raised at the call (`loc`, `node`: the call site),
    with the callee's error as `within` (and `__cause__`, as in Triton); `str()` then shows every
    call on the way, outermost first, and the message is the innermost one's.

    Errors about other source (submitted modules) or raised by the backend carry no `src`: they
    show the location, the source line and a caret only.
    """
    source_line_count_max_in_message = 12    # Triton's: lines of the function shown before the caret

    def __init__(self, message: str, loc=None, source_line: str | None = None, src: str | None = None,
                 node: SourceNode | None = None, within: CompilationError | None = None):
        self.message = str(message)
        self.loc = loc
        self.source_line = source_line
        self.src = src          # Triton's: the @jit function's source, from its `def` line
        self.node = node        # Triton's: where in `src`
        self.within = within    # the error inside the called @jit function
        super().__init__(self._format())

    @property
    def root(self) -> CompilationError:
        """The innermost error of a chain of @jit calls (itself when there is none)."""
        err = self
        while err.within is not None:
            err = err.within
        return err

    def _format(self) -> str:
        root = self.root
        head = f"{root.loc}: error: {self.message}" if root.loc is not None else f"error: {self.message}"
        if self.src is None or self.node is None:
            return head + _caret_lines(self.source_line, getattr(self.loc, "col", None))
        chain = [self]
        while chain[-1].within is not None and chain[-1].within.src is not None:
            chain.append(chain[-1].within)
        if len(chain) > _SHOWN_CALLS:
            hidden = len(chain) - _SHOWN_CALLS
            chain = chain[:_SHOWN_CALLS // 2] + [f"... {hidden} more @jit calls ..."] + chain[-(_SHOWN_CALLS // 2):]
        frames = [e if isinstance(e, str) else e._frame() for e in chain]
        return "\n".join([head, *frames, self.message])

    def _frame(self) -> str:
        """This function's part: where (Triton's "at line:col:"), its source up to the line, a caret."""
        fn = getattr(self.loc, "fn", "")
        where = f"{fn}()" if fn else "the kernel"
        called = ""
        if self.within is not None and self.within.src is not None:
            callee = getattr(self.within.loc, "fn", "")
            called = f", calling {callee}()" if callee else ""
        at = f"{self.loc}: " if self.loc is not None else ""
        out = [f"{at}in {where}{called} at {self.node.lineno}:{self.node.col_offset}:"]
        lines = self.src.split("\n")[:self.node.lineno][-self.source_line_count_max_in_message:]
        out += [_clip(line, self.node.col_offset if i == len(lines) - 1 else None)[0] for i, line in enumerate(lines)]
        out.append(" " * _clip(lines[-1], self.node.col_offset)[1] + "^" if lines else "")
        return "\n".join(out)

    def __str__(self) -> str:
        return self._format()

    @property
    def error_message(self) -> str:
        """The message without the location (Triton's attribute)."""
        return self.message

    def recast(self, cls: type[CompilationError]) -> CompilationError:
        """The same error as an instance of the subclass `cls` (e.g. interpret mode's)."""
        return cls(self.message, self.loc, self.source_line, self.src, self.node, self.within)

    def __reduce__(self):  # picklable across process pools (the tuner compiles in children)
        return (type(self), (self.message, self.loc, self.source_line, self.src, self.node, self.within))


def _clip(line: str, col: int | None) -> tuple[str, int]:
    """A source line as shown (a huge line, e.g. hostile source: the part around `col`), and where
    column `col` is in it."""
    col = col if col is not None and 0 <= col <= len(line) else None
    if len(line) <= _SHOWN_CHARS:
        return line, col or 0
    start = max(0, (col or 0) - _SHOWN_CHARS // 2)
    prefix = "..." if start else ""
    shown = prefix + line[start:start + _SHOWN_CHARS] + ("..." if start + _SHOWN_CHARS < len(line) else "")
    return shown, (col or 0) - start + len(prefix)


def _caret_lines(source_line: str | None, col) -> str:
    """The source line (without its indentation) and a caret under the column, each on its own line."""
    if not source_line:
        return ""
    line = source_line.rstrip("\n")
    text = line.lstrip()
    indent = len(line) - len(text)
    caret = col - indent if isinstance(col, int) and col >= indent else None
    text, at = _clip(text, caret)
    out = f"\n    {text}"
    if caret is not None:
        out += "\n    " + " " * at + "^"
    return out


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
