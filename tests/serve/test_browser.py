"""The explorer in a real browser (Playwright, Debian's Chromium) against a live server: type a text, the
grid; click a head, its routes; cut a route, the numbers of attnroute.knockout; click a token, its routes
in every head; save as report, a page that opens offline. No console error, no request off 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import re

import pytest

import attnroute as ar
from tests.show.conftest import ARGS, CHROMIUM

TEXT = "Alice gave Bob the book because she wanted him to read it."


@contextlib.contextmanager
def browser_page(url: str):
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (the browser tests need it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = browser.new_context(viewport={"width": 1500, "height": 1300}, accept_downloads=True)
            page = context.new_page()
            events = {"errors": [], "requests": []}
            page.on("console", lambda m: events["errors"].append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: events["errors"].append(str(e)))
            page.on("request", lambda r: events["requests"].append(r.url))
            page.goto(url)
            yield page, events
        finally:
            browser.close()


def wait_until(page, js: str, timeout: float = 30.0):
    """Poll ``js`` (an expression) until it is truthy: wait_for_function evaluates a string with eval(),
    which the page's CSP (no 'unsafe-eval') refuses, as it should."""
    import time

    deadline = time.monotonic() + timeout
    while not page.evaluate(f"() => !!({js})"):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {js}")
        page.wait_for_timeout(100)


def test_type_click_cut_and_save(smollm2_server, smollm2, tmp_path):
    with browser_page(smollm2_server.url) as (page, events):
        page.wait_for_selector("body[data-ready='idle']", state="attached")
        page.fill("#text", TEXT)
        page.click("#run")
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=60_000)
        assert page.locator("#grid rect.cell").count() == 30 * 9  # the grid appeared

        page.click("#grid rect.cell[data-layer='12'][data-head='4']")  # a head: its routes
        page.wait_for_selector(".panel[data-head='12.4'] line.route", state="attached", timeout=30_000)
        assert "L12.H4" in page.text_content("#detail-title")
        T = page.evaluate("G.tokens.length")
        assert page.locator(".panel[data-head='12.4'] svg.links text").count() == 2 + 2 * T  # every token

        # cut the strongest route of the last query: the page's numbers are attnroute.knockout's
        route = page.evaluate(
            """() => { const ls = [...document.querySelectorAll(".panel[data-head='12.4'] line.route")]
              .filter(l => +l.dataset.query === G.tokens.length - 1);
              ls.sort((a, b) => b.getAttribute('stroke-width') - a.getAttribute('stroke-width'));
              return [+ls[0].dataset.query, +ls[0].dataset.key]; }"""
        )
        q, k = route
        before = page.get_attribute("#metric-line", "data-after")
        page.dispatch_event(f".panel[data-head='12.4'] line.route[data-query='{q}'][data-key='{k}']", "click")
        wait_until(page, f"document.getElementById('metric-line').dataset.after !== '{before}'")
        shown_before = float(page.get_attribute("#metric-line", "data-before"))
        shown_after = float(page.get_attribute("#metric-line", "data-after"))
        assert page.locator("#cuts li").count() == 1 and "L12.H4" in page.text_content("#cuts li")
        ko = ar.knockout(smollm2, TEXT, source=str(q), target=str(k), window=1, heads=[4])
        assert abs(shown_before - ko.p_clean) <= 1e-6 and abs(shown_after - ko.p_route[12]) <= 1e-6
        assert page.locator("#top-after tr").count() == 5
        assert "cuts" in page.evaluate("decodeURIComponent(location.hash)")  # the view's state is in the URL

        page.click("#undo")  # undo: back to the clean numbers
        wait_until(page, "document.querySelectorAll('#cuts li').length === 0")
        # 1e-6 as above: the server process may run on another thread count than this one (its sums reorder)
        wait_until(page, f"Math.abs(+document.getElementById('metric-line').dataset.after - {ko.p_clean}) < 1e-6")

        page.click("#token-text .tok[data-index='7']")  # a token: its routes in every head
        wait_until(page, "document.getElementById('token-card').dataset.token === '7'")
        assert page.locator("#token-grid rect.cell").count() == 30 * 9
        assert "Token 7" in page.text_content("#token-title")

        page.dispatch_event(f".panel[data-head='12.4'] line.route[data-query='{q}'][data-key='{k}']", "click")
        wait_until(page, "document.querySelectorAll('#cuts li').length === 1")
        with page.expect_download(timeout=60_000) as dl:
            page.click("#save")
        saved = tmp_path / "saved.html"
        dl.value.save_as(saved)
        assert page.evaluate("document.getElementById('error').textContent") == ""
    assert events["errors"] == []
    assert all(u.startswith(smollm2_server.base + "/") or u.startswith(("blob:", "data:")) for u in events["requests"])

    # the saved page opens offline: every request blocked but the file itself
    with browser_page(saved.as_uri()) as (page, events):
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=30_000)
        assert page.locator("#grid rect.cell").count() == 30 * 9
        assert "L12.H4" in page.text_content("#detail-title")  # it opens on the view that was on screen
        assert "Token 7" in page.text_content("#token-title")
        cuts = page.text_content("#explorer-cuts")  # the cuts on screen, with the answer before and after
        said = re.search(r"L12\.H4.*?: ([0-9.]+) before, ([0-9.]+) after", cuts)
        assert said, cuts  # six decimals, from a server that may sum on another thread count: 1e-6 apart at most
        assert abs(float(said[1]) - ko.p_clean) <= 1.5e-6 and abs(float(said[2]) - ko.p_route[12]) <= 1.5e-6
    assert events["errors"] == [] and all(u.startswith("file:") for u in events["requests"])


def test_html_typed_as_text_is_shown_as_text(smollm2_server):
    evil = 'Hi <img src=x onerror="document.title=1"> there'
    with browser_page(smollm2_server.url) as (page, events):
        page.wait_for_selector("body[data-ready='idle']", state="attached")
        page.fill("#text", evil)
        page.click("#run")
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=60_000)
        assert page.locator("#token-text img, .tokens img, svg img").count() == 0
        assert "<img" in page.text_content("#token-text").replace(" ", "")
        assert page.title() == "attnroute explorer"
    assert events["errors"] == []


def test_state_in_the_url_restores_the_view(smollm2_server):
    with browser_page(smollm2_server.url) as (page, _):
        page.wait_for_selector("body[data-ready='idle']", state="attached")
        page.fill("#text", TEXT)
        page.click("#run")
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=60_000)
        page.click("#grid rect.cell[data-layer='3'][data-head='1']")
        page.wait_for_selector(".panel[data-head='3.1']", state="attached", timeout=30_000)
        url = page.url
    with browser_page(url) as (page, events):  # a fresh browser on the same URL: the same view
        page.wait_for_selector(".panel[data-head='3.1'] line.route", state="attached", timeout=60_000)
        assert page.input_value("#text") == TEXT
    assert events["errors"] == []


def test_prompt_pair_mode_patches_and_verifies_a_route(smollm2_server):
    with browser_page(smollm2_server.url) as (page, events):
        page.wait_for_selector("body[data-ready='idle']", state="attached")
        page.click("#tab-pair")
        page.click("#run-pair")
        page.wait_for_selector("body[data-pair='1']", state="attached", timeout=240_000)
        assert page.locator("#patch-head rect.cell").count() == 30 * 9
        assert page.locator("#patch-qkv svg").count() == 3
        rows = page.locator("#routes tr[data-route]")
        assert rows.count() == 20
        verified = float(rows.nth(0).locator("td.exact").text_content())  # the route table's own exact knockout
        rows.nth(0).locator("button").click()
        wait_until(page, "document.querySelector('#routes tr[data-route=\"0\"] td.exact').dataset.exact !== undefined")
        clicked = float(page.get_attribute("#routes tr[data-route='0'] td.exact", "data-exact"))
    assert abs(clicked - verified) <= 1e-3 * max(1.0, abs(verified))  # a whole eager rerun vs a restart
    assert events["errors"] == []
