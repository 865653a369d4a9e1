"""How the API's routes read requests — JSON bodies are standard JSON (service.core.json_input), a
query parameter has one value — and the list of an app's routes with the paths they answer.

FastAPI reads a JSON body with Python's lenient json module; this route reads it first with
`json_input.loads`, and answers 422 naming the place (`body.config.BLOCK`) for NaN, Infinity,
numbers out of range, lone surrogates, deep nesting or bytes that are not UTF-8 — instead of
storing them, or answering 500 or an undocumented 400. Routers take it with
`APIRouter(route_class=StandardJSONRoute)`.
"""
from __future__ import annotations

from email.message import Message

import fastapi.routing
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from service.core.json_input import JSONInputError, loads


def _is_json(content_type: str | None) -> bool:
    if not content_type:
        return False
    m = Message()
    m["content-type"] = content_type
    return m.get_content_maintype() == "application" and (
        m.get_content_subtype() == "json" or m.get_content_subtype().endswith("+json"))


async def one_value_per_query_parameter(request: Request) -> None:
    """A router dependency: `?kernel=a&kernel=b` is a 422 (FastAPI would take the last value and
    answer as if the other were not there); the same value twice is no ambiguity. Async: pure
    memory, so it runs on the event loop instead of costing a trip to the thread pool."""
    params = request.query_params
    for name in params:
        if len(set(params.getlist(name))) > 1:
            raise RequestValidationError([{"type": "value_error", "loc": ("query", name),
                                           "msg": "given more than once, with different values", "input": None}])


class StandardJSONRequest(Request):
    async def json(self):
        if not hasattr(self, "_standard_json"):
            self._standard_json = loads(await self.body())
        return self._standard_json


class StandardJSONRoute(APIRoute):
    """FastAPI's documented way to change how a request is read: a custom Request and APIRoute."""

    def get_route_handler(self):
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def standard_json_handler(request: Request):
            request = StandardJSONRequest(request.scope, request.receive)
            if _is_json(request.headers.get("content-type")) and await request.body():
                try:
                    await request.json()   # parsed once, here; FastAPI gets the same value
                except JSONInputError as exc:
                    raise RequestValidationError([{"type": "json_invalid", "loc": ("body", *exc.loc),
                                                   "msg": exc.message, "input": None}]) from None
            return await handler(request)

        return standard_json_handler


def api_routes(app: FastAPI):
    """(full path template, APIRoute) for every route of `app`, also those of included routers."""
    iter_contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    if iter_contexts is None:   # FastAPI before lazily included routers: included routes are copies with full paths
        for r in app.routes:
            if isinstance(r, APIRoute):
                yield r.path_format, r
        return
    for ctx in iter_contexts(app.routes):
        if isinstance(ctx.original_route, APIRoute) and ctx.path_format:
            yield ctx.path_format, ctx.original_route
