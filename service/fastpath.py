"""The hot path of the launch-time lookup, as pure ASGI.

`GET /api/v1/configs/best` is what every client process asks at its kernels' first launches, so it
is answered here without FastAPI's routing, dependency and validation machinery when the request is
well-formed and reads need no token. Anything else (a malformed parameter, reads behind a token)
falls through to the FastAPI route, which gives the documented answers (422 with the field and the
reason, 401). Both use the same in-memory ConfigIndex.
"""
from __future__ import annotations

import json
import re
from urllib.parse import parse_qsl

from service.api.problem_key import InvalidProblemKey, parse_problem_key

PATH = "/api/v1/configs/best"
_CC = re.compile(r"^\d+\.\d+$")


class _Route:  # what the metrics middleware reads as the route template
    path = PATH


_ROUTE = _Route()
_HEADERS = [(b"content-type", b"application/json")]


def _parse(query: bytes):
    """(kernel, key dict, gpu_model, cc) or None when anything is off (then FastAPI answers)."""
    try:
        params = parse_qsl(query.decode("latin-1"), keep_blank_values=True, strict_parsing=False, encoding="utf-8",
                           errors="strict")
    except (UnicodeDecodeError, ValueError):
        return None
    d = {}
    for k, v in params:
        if k in d or "\x00" in v:
            return None
        d[k] = v
    kernel, gpu, raw_key, cc = d.get("kernel"), d.get("gpu_model"), d.get("key", "{}"), d.get("compute_capability")
    if not kernel or not gpu or len(kernel) > 128 or len(gpu) > 200 or len(raw_key) > 4000:
        return None
    if cc is not None and (len(cc) > 16 or not _CC.match(cc)):
        return None
    try:
        key = parse_problem_key(raw_key)   # the route's validator: what it refuses, FastAPI answers with a 422
    except InvalidProblemKey:
        return None
    return kernel, key, gpu, cc


class LookupFastPath:
    """Answers are also memoized by query string for as long as the index they came from is the
    current one (a reload of best_configs starts a new memo), so a repeated question costs a dict
    lookup."""

    MEMO_MAX = 50_000

    def __init__(self, app, state):
        self.app = app
        self.state = state
        self._memo: dict[bytes, tuple[int, bytes]] = {}
        self._memo_of = None

    async def __call__(self, scope, receive, send):
        if (scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "GET"
                or self.state.settings.read_requires_token):
            return await self.app(scope, receive, send)
        index = self.state.config_index
        index.refresh_if_stale()
        current = index.current
        if self._memo_of is not current:
            self._memo, self._memo_of = {}, current
        qs = scope.get("query_string", b"")
        hit = self._memo.get(qs)
        if hit is None:
            parsed = _parse(qs)
            if parsed is None:
                return await self.app(scope, receive, send)
            found = index.lookup(*parsed)
            if found is None:
                hit = 404, json.dumps({"detail": f"no tuned config for kernel {parsed[0]!r} on {parsed[2]!r}"}).encode()
            else:
                hit = 200, json.dumps(found).encode()
            if len(self._memo) >= self.MEMO_MAX:
                self._memo.clear()
            self._memo[qs] = hit
        scope["route"] = _ROUTE
        status, data = hit
        await send({"type": "http.response.start", "status": status,
                    "headers": _HEADERS + [(b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})
