"""`/docs`: Swagger UI for the REST API, served by the app itself.

FastAPI's default page loads Swagger UI from a CDN, so it is blank on a machine without internet
access. The assets come from the `fastapi-swagger` package (a pinned dependency that ships the
Swagger UI 5 distribution, which renders the OpenAPI 3.1 document FastAPI writes) and are served
under /static/swagger."""
from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/static/swagger"


def assets_directory() -> str:
    return str(resources.files("fastapi_swagger") / "resources")


def install(app: FastAPI, openapi_url: str, docs_url: str = "/docs") -> None:
    """Serve Swagger UI at `docs_url` for the document at `openapi_url` (call it before the
    /static mount: the first matching mount wins)."""
    app.mount(ASSETS_URL, StaticFiles(directory=assets_directory()), name="swagger-assets")

    @app.get(docs_url, include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
            swagger_ui_parameters={"displayRequestDuration": True, "persistAuthorization": True})
