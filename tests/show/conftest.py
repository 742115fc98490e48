"""Shared by the browser tests: Debian's chromium driven by Playwright, offline."""

import contextlib
import os

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def open_page():
    """open_page(path, ready) -> context manager yielding (page, events) once the selector ``ready``
    is in the page (Playwright waits on it; no sleeps)."""
    from playwright.sync_api import sync_playwright

    @contextlib.contextmanager
    def opener(path, ready: str):
        if not os.path.exists(CHROMIUM):
            pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (the browser tests need it)")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1200})
                events = {"errors": [], "dialogs": []}
                page.on("console", lambda m: events["errors"].append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: events["errors"].append(str(e)))
                page.on("dialog", lambda d: (events["dialogs"].append(d.message), d.dismiss()))
                page.goto(path.as_uri())
                page.wait_for_selector(ready, state="attached")
                yield page, events
            finally:
                browser.close()

    return opener
