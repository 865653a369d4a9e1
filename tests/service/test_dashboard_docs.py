"""`/docs` works offline: Swagger UI's files come from the app, and the page renders the API's
operations in real Chromium with every request off 127.0.0.1 refused."""
from __future__ import annotations

import pytest

from db.migrate import upgrade
from dash_browser import PageWatch, browser  # noqa: F401 - a fixture
from svc_helpers import LiveServer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('docs') / 'blocktune.db'}"
    upgrade(url)
    s = LiveServer(url)
    try:
        yield s
    finally:
        s.stop()


def test_docs_render_the_operations_with_the_network_blocked(browser, server):
    ctx = browser.new_context()
    page = ctx.new_page()
    watch = PageWatch(page)
    refused: list[str] = []

    def only_local(route):
        if route.request.url.startswith("http://127.0.0.1:"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort("internetdisconnected")

    page.route("**/*", only_local)
    page.goto(server.base + "/docs")
    page.wait_for_selector(".opblock", timeout=20_000)
    summaries = page.locator(".opblock .opblock-summary-path").all_inner_texts()
    paths = {p.replace("\u200b", "") for p in summaries}
    assert {"/api/v1/jobs", "/api/v1/jobs/{job_id}", "/api/v1/configs"} <= paths, paths
    assert page.locator(".opblock-post").count() >= 1
    # the page's script and style were served by the app, none was refused
    assert not refused, refused
    local = [u for u in watch.requests if "/static/swagger/" in u]
    assert any(u.endswith("swagger-ui-bundle.js") for u in local) and any(u.endswith("swagger-ui.css") for u in local)
    # the title of the document is rendered: the UI really ran over the OpenAPI 3.1 document
    assert "blocktune" in page.locator(".information-container .title").inner_text()
    watch.check(server.base)
    ctx.close()
