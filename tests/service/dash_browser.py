"""Headless Chromium for the dashboard tests: Debian's /usr/bin/chromium driven by Playwright (never a
downloaded browser), and pages that fail the test when they reach off the server or throw."""
from __future__ import annotations

import pytest

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class PageWatch:
    """The requests a page made and the script errors it threw."""

    def __init__(self, page):
        self.requests: list[str] = []
        self.errors: list[str] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def check(self, base: str) -> None:
        off_site = [u for u in self.requests if not u.startswith(base)]
        assert not off_site, off_site
        assert not self.errors, self.errors
