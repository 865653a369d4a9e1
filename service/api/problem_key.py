"""A problem key: the JSON object of a kernel's key values (sizes, dtype names, flags) under which
best configs are stored (`best_configs.problem_key`, canonical JSON) and looked up.

One definition for every place that takes a key from a client — the lookup route, the lookup's
fast path (service/fastpath.py) and publishing — so they refuse the same keys with the same reason,
and the OpenAPI document states the same rules. The bounds keep the canonical JSON under
MAX_KEY_BYTES, and so the unique index on (kernel_fingerprint ≤ 128 characters, problem_key,
gpu_model ≤ 200 characters) under PostgreSQL's btree row limit of 2704 bytes.
"""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, Strict, StringConstraints, TypeAdapter, ValidationError

from db.repo import canonical_key
from service.core.json_input import JSONInputError, loads

MAX_KEY_BYTES = 1024
# I-JSON's integer range (RFC 7493): exact in a double, so every JSON reader (and JSON Schema
# validator) agrees on the value, and the nearest-key distance stays a finite float
INT_MIN, INT_MAX = -(2**53 - 1), 2**53 - 1

KeyName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")]
# strict: a value keeps its JSON type ("0000" stays a string, and is refused when too long, rather
# than becoming the integer 0)
KeyValue = (Annotated[int, Strict(), Field(ge=INT_MIN, le=INT_MAX)]
            # open bounds: an integer beyond the int range, taken as a float, is at least 2**53 in size
            | Annotated[float, Strict(), Field(gt=-(2**53), lt=2**53, allow_inf_nan=False)]
            | Annotated[str, Strict(), StringConstraints(max_length=32, pattern=r"^[\x20-\x7e]*$")]
            | Annotated[bool, Strict()] | None)


def _fits(key: dict[str, Any]) -> dict[str, Any]:
    size = len(canonical_key(key).encode())
    if size > MAX_KEY_BYTES:
        raise ValueError(f"the key's canonical JSON is {size} bytes, over the limit of {MAX_KEY_BYTES}")
    return key


ProblemKey = Annotated[
    dict[KeyName, KeyValue],
    Field(max_length=8, description="key names (identifiers) to numbers (integers within ±(2**53 - 1)), short "
                                    "printable-ASCII strings, booleans "
                                    f"or null; at most 8, canonical JSON at most {MAX_KEY_BYTES} bytes",
          json_schema_extra={"additionalProperties": False}),   # patternProperties names the only keys allowed
    AfterValidator(_fits),
]

_ADAPTER = TypeAdapter(ProblemKey)
JSON_SCHEMA = _ADAPTER.json_schema()


class InvalidProblemKey(ValueError):
    """`errors`: [(loc inside the key, reason, type)]."""

    def __init__(self, errors: list[tuple[tuple, str, str]]):
        super().__init__("; ".join(reason for _, reason, _ in errors))
        self.errors = errors


def parse_problem_key(raw: str) -> dict[str, Any]:
    """The problem key in `raw` (JSON text, e.g. a lookup's `key` parameter); raises InvalidProblemKey."""
    try:
        value = loads(raw)
    except JSONInputError as exc:
        raise InvalidProblemKey([(exc.loc, exc.message, "json_invalid")]) from None
    try:
        return _ADAPTER.validate_python(value)
    except ValidationError as exc:
        raise InvalidProblemKey([(tuple(e["loc"]), e["msg"], e["type"])
                                 for e in exc.errors(include_url=False)]) from None
