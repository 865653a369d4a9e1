"""A problem key taken from a client as JSON text (the lookup's `key` parameter): parsed as
standard JSON (service.core.json_input) and validated with the one definition of a problem key
(jobspec.problem_key, checked by jobspec.model.ProblemKey), for the lookup route and its fast path (service/fastpath.py) alike."""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from jobspec.model import PROBLEM_KEY
from service.core.json_input import JSONInputError, loads


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
        return PROBLEM_KEY.validate_python(value)
    except ValidationError as exc:
        raise InvalidProblemKey([(tuple(e["loc"]), e["msg"], e["type"])
                                 for e in exc.errors(include_url=False)]) from None
