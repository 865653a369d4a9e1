"""Standard JSON in: what the API accepts as a JSON request body or a JSON query parameter.

Python's json module is lenient where our databases and responses are not: it reads `NaN`,
`Infinity` and `-Infinity`, turns `1e309` into inf, and turns a `"\\ud800"` escape into a lone
surrogate that no UTF-8 encoder (psycopg's, a response's) can write back. Such input was stored,
and then made every read of it fail. `loads` refuses all of it with the reason and where it is, so
nothing is accepted that cannot be stored and sent back.
"""
from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32                      # arrays/objects inside each other; a job spec uses about 6
_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONInputError(ValueError):
    """`message` says what is wrong; `loc` is the path to it inside the document (keys, indexes)."""

    def __init__(self, message: str, loc: tuple = ()):
        super().__init__(message)
        self.message = message
        self.loc = loc


class _NotStandard:
    """Stands in, while parsing, for a value JSON does not have, so that `check` can say where it is."""

    def __init__(self, reason: str):
        self.reason = reason


def _constant(name: str) -> _NotStandard:
    return _NotStandard(f"{name} is not standard JSON: send finite numbers")


def _float(text: str) -> float | _NotStandard:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return _NotStandard(f"number {text[:40]} is out of range")
    return value


def check(value: Any) -> Any:
    """Refuse values JSON has not (NaN, Infinity, numbers beyond a double's range), lone surrogates
    (in keys and strings) and nesting deeper than MAX_DEPTH anywhere in a parsed document; returns
    it unchanged. (Integers of any size are JSON; where one is stored in a column, its field bounds it.)"""
    stack: list[tuple[Any, tuple, int]] = [(value, (), 0)]
    while stack:
        v, loc, depth = stack.pop()
        if isinstance(v, _NotStandard):
            raise JSONInputError(v.reason, loc)
        if isinstance(v, str):
            if not v.isascii() and _SURROGATE.search(v):
                raise JSONInputError("text with a lone surrogate (an unpaired \\ud800-\\udfff escape) is not valid "
                                     "Unicode", loc)
        elif isinstance(v, (dict, list)):
            if depth >= MAX_DEPTH:
                raise JSONInputError(f"nested deeper than {MAX_DEPTH} levels", loc)
            if isinstance(v, dict):
                for k, x in v.items():
                    if not k.isascii() and _SURROGATE.search(k):
                        raise JSONInputError("a key with a lone surrogate (an unpaired \\ud800-\\udfff escape) is "
                                             "not valid Unicode", loc + (k.encode("utf-8", "replace").decode(),))
                    stack.append((x, loc + (k,), depth + 1))
            else:
                stack.extend((x, loc + (i,), depth + 1) for i, x in enumerate(v))
    return value


def encodable(value: Any) -> Any:
    """`value` (text, or JSON data) with lone surrogates replaced by U+FFFD, so that it can be written
    as UTF-8: for reading rows stored before `loads` refused such text."""
    if isinstance(value, str):
        return value if value.isascii() else _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encodable(v) for v in value]
    return value


def loads(data: bytes | str) -> Any:
    """Parse standard JSON (RFC 8259, UTF-8) and `check` it; raises JSONInputError."""
    if isinstance(data, (bytes, bytearray)):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONInputError(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        value = json.loads(data, parse_constant=_constant, parse_float=_float)
    except json.JSONDecodeError as exc:
        raise JSONInputError(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise JSONInputError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:   # an integer of more digits than Python converts
        raise JSONInputError(f"invalid JSON: {exc}") from None
    return check(value)
