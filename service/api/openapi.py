"""The OpenAPI document, made to say what the service really answers.

FastAPI documents each route's parameters, body and success model, and a generic 422. What it
cannot see, this adds from the application itself (FastAPI's documented "extending OpenAPI"):

- the app's own 422 body (`ValidationErrorOut`: field, reason, type, loc — service/api/errors.py)
  instead of FastAPI's default one, and `ErrorOut` ({"detail": "..."}) on every other error;
- authentication: an operation needs a token when one of its dependencies returns a `TokenSnapshot`
  (service/api/deps.py), and its reads need one when a dependency returns `TokenSnapshot | None` and this
  server runs with `read_requires_token`. Those operations get the security schemes and 401/403;
- 413 (service.core.limits) on operations that take a body; 422 and 503 (the database is
  unreachable, service/api/errors.py) on every /api/v1 operation;
- a query parameter declared as a string holding JSON (`contentMediaType: application/json` with
  a `contentSchema`) becomes an OpenAPI parameter with `content`, so that clients and test tools
  send the JSON the parameter takes;
- a documented success status without a body schema (a replayed idempotent submission: 200) gets
  the operation's success schema.
"""
from __future__ import annotations

import types
import typing
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from service.api.routing import api_routes
from service.api.schemas import ErrorOut, ValidationErrorOut
from service.core.token_cache import TokenSnapshot

REF = "#/components/schemas/{model}"
TOKEN_SCHEMES = {
    "bearerToken": {"type": "http", "scheme": "bearer",
                    "description": "an API token: `Authorization: Bearer <token>` (`blocktune token create`)"},
    "apiTokenHeader": {"type": "apiKey", "in": "header", "name": "X-API-Token", "description": "an API token"},
}
# reads also take the dashboard's login cookie (service/dashboard/login.py)
COOKIE_SCHEME = {"loginCookie": {"type": "apiKey", "in": "cookie", "name": "blocktune_session",
                                 "description": "the dashboard's login session (reads only)"}}
WITH_BODY = ("post", "put", "patch", "delete")


def _returns_token(call) -> str | None:
    try:
        ret = typing.get_type_hints(call).get("return")
    except Exception:  # noqa: BLE001 - a callable without resolvable hints is no token dependency
        return None
    if ret is TokenSnapshot:
        return "always"
    if isinstance(ret, (types.UnionType, type(typing.Optional[int]))) and set(typing.get_args(ret)) == {
            TokenSnapshot, type(None)}:
        return "reads"
    return None


def token_requirement(route: APIRoute) -> str | None:
    """"always", "reads" (when reads need a token) or None, from the route's dependencies."""
    found = set()
    stack = list(route.dependant.dependencies)
    while stack:
        d = stack.pop()
        stack.extend(d.dependencies)
        kind = _returns_token(d.call) if d.call is not None else None
        if kind:
            found.add(kind)
    return "always" if "always" in found else next(iter(found), None)


def _error(description: str, model: str = "ErrorOut", headers: dict | None = None) -> dict:
    r: dict[str, Any] = {"description": description,
                         "content": {"application/json": {"schema": {"$ref": REF.format(model=model)}}}}
    if headers:
        r["headers"] = headers
    return r


def _json_content_parameter(param: dict) -> None:
    schema = param.get("schema") or {}
    if schema.get("contentMediaType") == "application/json" and "contentSchema" in schema:
        param["content"] = {"application/json": {"schema": schema["contentSchema"]}}
        del param["schema"]


def _models() -> dict:
    out = {}
    for model in (ErrorOut, ValidationErrorOut):
        schema = model.model_json_schema(ref_template=REF)
        out.update(schema.pop("$defs", {}))
        out[model.__name__] = schema
    return out


def _truthful(app: FastAPI, doc: dict, api_prefix: str) -> dict:
    reads_need_token = app.state.settings.read_requires_token
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for stale in ("HTTPValidationError", "ValidationError"):
        schemas.pop(stale, None)
    schemas.update(_models())
    uses_cookie = False
    for path, route in api_routes(app):
        if not route.include_in_schema:
            continue
        for method in sorted(route.methods - {"HEAD"}):
            op = doc.get("paths", {}).get(path, {}).get(method.lower())
            if op is None:
                continue
            responses = op.setdefault("responses", {})
            for param in op.get("parameters", []):
                _json_content_parameter(param)
            # API operations also refuse a query parameter given twice (routing.one_value_per_query_parameter)
            if op.get("parameters") or "requestBody" in op or path.startswith(api_prefix):
                responses["422"] = _error(responses.get("422", {}).get("description") or "invalid input: each "
                                          "field with the reason", "ValidationErrorOut")
            need = token_requirement(route)
            if need == "always" or (need == "reads" and reads_need_token):
                schemes = list(TOKEN_SCHEMES) + (list(COOKIE_SCHEME) if need == "reads" else [])
                uses_cookie |= need == "reads"
                op["security"] = [{name: []} for name in schemes]
                responses.setdefault("401", _error("no API token, or an unknown or revoked one", headers={
                    "WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}}))
                responses.setdefault("403", _error("the token lacks the scope this operation needs"))
            if method.lower() in WITH_BODY:
                responses.setdefault("413", _error("the request body is over the server's limit"))
            if path.startswith(api_prefix):
                responses.setdefault("503", _error("the database is unavailable (or the service is busy): retry "
                                                   "after the Retry-After seconds", headers={
                    "Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}))
            success = next((r["content"] for code, r in sorted(responses.items())
                            if code.startswith("2") and r.get("content")), None)
            for code, r in responses.items():
                if "content" in r:
                    continue
                if code.startswith(("4", "5")):
                    r["content"] = {"application/json": {"schema": {"$ref": REF.format(model="ErrorOut")}}}
                elif code.startswith("2") and success is not None:
                    r["content"] = success
    if any("security" in op for ops in doc.get("paths", {}).values() for op in ops.values()):
        components["securitySchemes"] = {**TOKEN_SCHEMES, **(COOKIE_SCHEME if uses_cookie else {})}
    return doc


def install(app: FastAPI, api_prefix: str) -> None:
    """Serve the truthful document at app.openapi_url (built once, on first request)."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, openapi_version=app.openapi_version,
                              description=app.description, routes=app.routes)
            app.openapi_schema = _truthful(app, doc, api_prefix)
        return app.openapi_schema

    app.openapi = openapi
