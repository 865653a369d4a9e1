"""The hot path of the launch-time lookup, as pure ASGI.

`GET /api/v1/configs/best` is what every client process asks at its kernels' first launches, so it
is answered here without FastAPI's routing, dependency and validation machinery when the request is
well-formed and, where reads need a token, carries one verified in the last seconds (the
verified-token cache). Anything else (a malformed parameter, a token not in the cache, the login
cookie) falls through to the FastAPI route, which gives the documented answers (422 with the field
and the reason, 401) and checks tokens in the thread pool. Both answer from the same in-memory
ConfigIndex and its memo, and refuse an over-long query string the same way (414). Nothing here
touches the database.
"""
from __future__ import annotations

import json
import re
from urllib.parse import unquote_to_bytes

from cachetools import LRUCache

from jobspec.problem_key import canonical_key
from service.api.problem_key import InvalidProblemKey, parse_problem_key

PATH = "/api/v1/configs/best"
_CC = re.compile(r"^\d+\.\d+$")


class _Route:  # what the metrics middleware reads as the route template
    path = PATH


_ROUTE = _Route()
_HEADERS = [(b"content-type", b"application/json")]


# A client asks for the same few keys over and over: their parsed, validated form is kept (bounded
# by the keys' bytes; only the event loop's thread reads and writes it).
_PARSED_KEYS: LRUCache = LRUCache(maxsize=4_000_000, getsizeof=lambda entry: entry[1])


def _problem_key(raw: str) -> tuple[dict, str]:
    """The validated key in `raw` and its canonical text."""
    entry = _PARSED_KEYS.get(raw)
    if entry is None:
        key = parse_problem_key(raw)
        canonical = canonical_key(key)
        entry = (key, 2 * len(raw) + len(canonical) + 256, canonical)
        _PARSED_KEYS[raw] = entry
    return dict(entry[0]), entry[2]


# Each distinct query string's parse, likewise (bounded by its bytes): a client repeats its exact
# questions, and splitting and unquoting them was a third of the fast path's own work. A query
# the fast path does not answer is not kept (it falls through to the route anyway).
_PARSED_QUERIES: LRUCache = LRUCache(maxsize=8_000_000, getsizeof=lambda entry: entry[1])


def _parsed(query: bytes):
    """_parse(query), remembered for a query string that parses."""
    entry = _PARSED_QUERIES.get(query)
    if entry is None:
        parsed = _parse(query)
        if parsed is None:
            return None
        entry = (parsed, 2 * len(query) + 512)
        _PARSED_QUERIES[query] = entry
    kernel, key, gpu, cc, key_str = entry[0]
    return kernel, dict(key), gpu, cc, key_str


def _unquote(s: str) -> str:
    """unquote_plus(s, errors="strict"), without its generality (twice as fast)."""
    return unquote_to_bytes(s.replace("+", " ")).decode("utf-8")


def _parse(query: bytes):
    """(kernel, key dict, gpu_model, cc, canonical key) or None when anything is off (then FastAPI answers).

    Splits as parse_qsl does (on "&", "+" for a space, blank values kept) but unquotes only what
    is quoted: this runs for every lookup."""
    try:
        text = query.decode("ascii")          # a client's query is percent-encoded ASCII; else: the route
    except UnicodeDecodeError:
        return None
    d = {}
    try:
        for part in text.split("&"):
            if not part:
                continue
            k, _, v = part.partition("=")
            if "%" in k or "+" in k:
                k = _unquote(k)
            if "%" in v or "+" in v:
                v = _unquote(v)
            if k in d or "\x00" in v:
                return None
            d[k] = v
    except UnicodeDecodeError:
        return None
    kernel, gpu, raw_key, cc = d.get("kernel"), d.get("gpu_model"), d.get("key", "{}"), d.get("compute_capability")
    if not kernel or not gpu or len(kernel) > 128 or len(gpu) > 200 or len(raw_key) > 4000:
        return None
    if cc is not None and (len(cc) > 16 or not _CC.match(cc)):
        return None
    try:
        key, key_str = _problem_key(raw_key)   # the route's validator: what it refuses, FastAPI answers with a 422
    except InvalidProblemKey:
        return None
    return kernel, key, gpu, cc, key_str


def query_too_long(size: int, limit: int) -> str:
    """The 414 detail, shared with the FastAPI route."""
    return f"the query string is {size} bytes, over the limit of {limit} bytes for a config lookup"


def _header_token(scope) -> str | None:
    """The token of `Authorization: Bearer` or `X-API-Token`, as service.api.deps.token_from_request
    reads them (no cookie: a cookie-carrying read falls through to the route)."""
    bearer = api = None
    for name, value in scope["headers"]:
        if name == b"authorization" and bearer is None:
            scheme, _, rest = value.decode("latin-1").partition(" ")
            bearer = rest.strip() if scheme.lower() == "bearer" else ""
        elif name == b"x-api-token" and api is None:
            api = value.decode("latin-1")
    return bearer or api or None


async def _send(send, status: int, data: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": _HEADERS + [(b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


class LookupFastPath:
    def __init__(self, app, state):
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "GET":
            return await self.app(scope, receive, send)
        state = self.state
        settings = state.settings
        if settings.read_requires_token:
            snap = state.verified_tokens.fresh(_header_token(scope))
            if snap is None or not snap.allows("read"):
                return await self.app(scope, receive, send)
        qs = scope.get("query_string", b"")
        if len(qs) > settings.lookup_max_query_bytes:
            status, data = 414, json.dumps({"detail": query_too_long(len(qs), settings.lookup_max_query_bytes)}).encode()
        else:
            parsed = _parsed(qs)
            if parsed is None:
                return await self.app(scope, receive, send)
            status, data = state.config_index.answer(*parsed)
        scope["route"] = _ROUTE
        await _send(send, status, data)
