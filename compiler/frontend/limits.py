"""Bounds on the work and the values of compilation: every one the front end enforces, in one place.

Kernel source may be hostile (the service compiles what anyone submits), so the front end refuses,
with a `CompilationError` at the offending line, what no real kernel needs and what would otherwise
make compilation run for hours or exhaust memory: `9**9**9`, `'a' * 10**9`,
`tl.static_range(10**7)`, unrolling or inlining that multiplies the IR, source nested thousands of
levels deep. Each bound is far above what real kernels reach — measured over every kernel in this
repository's tests and benchmarks (Triton's tutorials among them): at most 29 levels of syntax
nesting, 153 IR ops and 327 syntax-node visits per specialization, 2 levels of @jit inlining.
"""
from __future__ import annotations

import re

# Triton's own limit on the elements of one block (triton.language.core.TRITON_MAX_TENSOR_NUMEL):
# tl.arange / tl.zeros / reshapes... beyond it fail in Triton with "numel (N) exceeds triton maximum
# tensor numel (1048576)".
TRITON_MAX_TENSOR_NUMEL = 1 << 20

# Kernel source text (characters).
MAX_SOURCE_CHARS = 1_000_000

# Levels of syntax nesting (expressions, blocks and elif chains all count) from the module down.
# CPython's own parser stops at 200 nested brackets and 100 indentation levels; 100 keeps the
# recursive code generator far from Python's recursion limit.
MAX_NESTING = 100

# Nested @jit calls (each is inlined at its call site; recursion is not supported).
MAX_INLINE_DEPTH = 32

# Compile-time values. An int of 4096 bits prints in 1234 digits, under CPython's 4300-digit
# conversion limit; IR constants need 64 bits at most.
MAX_INT_BITS = 4096
MAX_STR_CHARS = 100_000          # strings (messages, f-strings) and bytes
MAX_SEQUENCE_LEN = 10_000        # tuples and lists

# Iterations of one `tl.static_range` loop (each one is unrolled: generated again).
MAX_STATIC_RANGE_TRIPS = 4096

# Per specialization: syntax-node visits (compile-time evaluation: unrolled loops and inlined calls
# repeat theirs) and IR ops emitted (about 0.1 ms each here: 20,000 take a few seconds).
MAX_FRONTEND_STEPS = 200_000
MAX_IR_OPS = 20_000


def value_problem(v) -> str | None:
    """Why the compile-time value `v` is over a bound, or None. Only looks at `v` itself (its
    items were checked when they were made)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        bits = v.bit_length()
        return None if bits <= MAX_INT_BITS else \
            f"compile-time integer of {bits} bits is over the limit of {MAX_INT_BITS} bits"
    if isinstance(v, (str, bytes)):
        return None if len(v) <= MAX_STR_CHARS else \
            f"compile-time {type(v).__name__} of {len(v)} characters is over the limit of {MAX_STR_CHARS}"
    if isinstance(v, (tuple, list)):
        return None if len(v) <= MAX_SEQUENCE_LEN else \
            f"compile-time {type(v).__name__} of {len(v)} items is over the limit of {MAX_SEQUENCE_LEN}"
    return None


def literal_problem(v) -> str | None:
    """`value_problem` of `v` and, for literal containers (module-level constants), of its items."""
    stack = [v]
    seen = 0
    while stack:
        x = stack.pop()
        seen += 1
        if seen > 10 * MAX_SEQUENCE_LEN:
            return f"compile-time constant with more than {10 * MAX_SEQUENCE_LEN} items in all is over the limit"
        why = value_problem(x)
        if why:
            return why
        if isinstance(x, (tuple, list, set, frozenset)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x)
            stack.extend(x.values())
    return None


def text_problem(v) -> str | None:
    """Why `str(v)` / `format(v)` of a compile-time value would be a string over the bound
    (a tuple of long strings prints as their sum), estimated without making it."""
    size, stack = 0, [v]
    while stack:
        x = stack.pop()
        if isinstance(x, (str, bytes)):
            size += len(x) + 3
        elif isinstance(x, int):
            size += x.bit_length() // 3 + 2
        elif isinstance(x, (tuple, list)):
            size += 2 * len(x) + 2
            stack.extend(x)
        else:
            size += 64
        if size > MAX_STR_CHARS:
            return f"the text of this compile-time value would be over the limit of {MAX_STR_CHARS} characters"
    return None


def _int_bits(x) -> int:
    return int(x).bit_length() if isinstance(x, int) else 0


def binop_problem(op: str, left, right) -> str | None:
    """Why `left <op> right` on compile-time values would make a value over a bound, estimated
    *before* computing it (`9**9**9` is never computed). `op` is "pow", "lshift" or "mul"; other
    operators at most double their operands' size, which `value_problem` catches afterwards."""
    ints = isinstance(left, int) and isinstance(right, int)
    if op == "pow" and ints and right > 0 and abs(left) > 1:
        bits = (abs(left).bit_length() - 1) * right + 1       # at least this many
        if bits > MAX_INT_BITS:
            return (f"compile-time {_num(left)} ** {_num(right)} would have about {_num(bits)} bits, "
                    f"over the limit of {MAX_INT_BITS} bits")
    if op == "lshift" and ints and left != 0 and right > 0:
        bits = _int_bits(abs(left)) + right
        if bits > MAX_INT_BITS:
            return (f"compile-time {_num(left)} << {_num(right)} would have {_num(bits)} bits, "
                    f"over the limit of {MAX_INT_BITS} bits")
    if op == "mul":
        seq, n = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(seq, (str, bytes, tuple, list)) and isinstance(n, int) and not isinstance(n, bool) and n > 0:
            size = len(seq) * n
            limit = MAX_SEQUENCE_LEN if isinstance(seq, (tuple, list)) else MAX_STR_CHARS
            what = "items" if isinstance(seq, (tuple, list)) else "characters"
            if size > limit:
                return (f"compile-time {type(seq).__name__} * {_num(n)} would have {_num(size)} {what}, "
                        f"over the limit of {limit}")
    return None


_FORMAT_NUMBER = re.compile(r"\d+")


def format_spec_problem(spec) -> str | None:
    """A format spec whose width or precision would make a string over the bound (f"{x:>999999999}")."""
    if not isinstance(spec, str):
        return None
    for m in _FORMAT_NUMBER.finditer(spec):
        digits = m.group().lstrip("0") or "0"
        if len(digits) > 9 or int(digits) > MAX_STR_CHARS:
            shown = digits if len(digits) <= 12 else digits[:12] + "..."
            return f"format width or precision {shown} is over the limit of {MAX_STR_CHARS} characters"
    return None


def _num(n: int) -> str:
    """`n` for a message: exact when short, else its order of magnitude (never a huge string)."""
    if abs(n) < 10**12:
        return str(n)
    return f"{'-' if n < 0 else ''}~10^{int((abs(n).bit_length() - 1) * 0.30103)}"


__all__ = ["TRITON_MAX_TENSOR_NUMEL", "MAX_SOURCE_CHARS", "MAX_NESTING", "MAX_INLINE_DEPTH", "MAX_INT_BITS",
           "MAX_STR_CHARS", "MAX_SEQUENCE_LEN", "MAX_STATIC_RANGE_TRIPS", "MAX_FRONTEND_STEPS", "MAX_IR_OPS",
           "value_problem", "literal_problem", "binop_problem", "format_spec_problem", "text_problem"]
