"""A problem key: the JSON object of a kernel's key values (sizes, dtype names, flags) under which
best configs are stored (`best_configs.problem_key`, its canonical JSON) and looked up.

One definition for every part: a job spec's `problem_key()`, the tuner storing its winner, the
service's lookup, fast path and publishing (which refuse the same keys with the same reason, and
whose OpenAPI document states these rules), and the client asking at launch time. A tensor argument
in a key stands for its dtype name ("float16"), as the compiler's autotuner keys it
(compiler.runtime.jit.key_value).

The bounds keep the canonical JSON under MAX_KEY_BYTES, and so the unique index on
(kernel_fingerprint ≤ 128 characters, problem_key, gpu_model ≤ 200 characters) under PostgreSQL's
btree row limit of 2704 bytes. `jobspec.model.ProblemKey` is the pydantic type that checks them
(this module stays free of pydantic: the client's launch-time lookup imports it).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

MAX_KEY_NAMES = 8
MAX_KEY_BYTES = 1024
# I-JSON's integer range (RFC 7493): exact in a double, so every JSON reader (and JSON Schema
# validator) agrees on the value, and the nearest-key distance stays a finite float
INT_MIN, INT_MAX = -(2**53 - 1), 2**53 - 1
KEY_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,31}$"
MAX_STRING_CHARS = 32
STRING_PATTERN = r"^[\x20-\x7e]*$"        # printable ASCII


def canonical_key(values: Mapping[str, Any]) -> str:
    """The canonical JSON of a problem key: sorted keys, no spaces (the `problem_key` column)."""
    return json.dumps(dict(values), sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(obj):
    if hasattr(obj, "item"):   # numpy / torch scalars
        return obj.item()
    raise TypeError(f"not JSON-serializable in a problem key: {obj!r}")
