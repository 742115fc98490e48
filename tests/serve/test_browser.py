"""The explorer in a real browser (Playwright, Debian's Chromium) against a live server: type a text, the
grid; click a head, its routes; cut a route, the numbers of attnroute.knockout; click a token, its routes
in every head; save as report, a page that opens offline. No console error, no request off 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import re

import pytest

import attnroute as ar
from tests.show.conftest import ARGS, CHROMIUM

TEXT = "Alice gave Bob the book because she wanted him to read it."
# the page's forward against knockout's batched copies (and a server that may run on another thread count):
# float32 sums in another order over 30 layers, 2e-6 apart on SmolLM2's prompts, 1.2e-6 uncut on an AVX2 machine
PATHS = 1e-5


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
        # the cut: 1e-5, since knockout runs its windows as copies in batched forwards (sums in another order)
        assert abs(shown_before - ko.p_clean) <= PATHS and abs(shown_after - ko.p_route[12]) <= PATHS
        assert page.locator("#top-after tr").count() == 5
        assert "cuts" in page.evaluate("decodeURIComponent(location.hash)")  # the view's state is in the URL

        page.click("#undo")  # undo: back to the clean numbers
        wait_until(page, "document.querySelectorAll('#cuts li').length === 0")
        wait_until(page, f"Math.abs(+document.getElementById('metric-line').dataset.after - {ko.p_clean}) < {PATHS}")

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
        assert said, cuts  # six decimals: half a unit of the sixth more than PATHS
        assert abs(float(said[1]) - ko.p_clean) <= PATHS + 5e-7 and abs(float(said[2]) - ko.p_route[12]) <= PATHS + 5e-7
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
        titles = page.eval_on_selector_all("#patch-qkv svg", "els => els.map(e => e.querySelector('text').textContent)")
        assert titles == ["query head", "kv head", "kv head"]  # k and v grids are over kv heads
        rows = page.locator("#routes tr[data-route]")
        assert rows.count() == 20
        # SmolLM2's top routes end on its sink (key 0): the content routes follow, said so (issue 53.6)
        assert page.locator("#routes tr[data-content-route]").count() == 20
        assert "attention sink at key 0" in page.text_content("#routes .sink-note")
        verified = float(rows.nth(0).locator("td.exact").text_content())  # the route table's own exact knockout
        rows.nth(0).locator("button").click()
        wait_until(page, "document.querySelector('#routes tr[data-route=\"0\"] td.exact').dataset.exact !== undefined")
        clicked = float(page.get_attribute("#routes tr[data-route='0'] td.exact", "data-exact"))
        page.click("#run-circuit")  # the pair's circuit drawn; an edge clicked is path-patched exactly
        wait_until(page, "document.getElementById('circuit-graph').dataset.edges !== undefined", 240)
        drawn = int(page.get_attribute("#circuit-graph", "data-edges"))
        assert page.locator("#circuit-graph line.edge").count() == drawn > 0
        page.dispatch_event("#circuit-graph line.edge >> nth=0", "click")
        wait_until(page, "document.querySelector('#circuit-graph line.edge').dataset.exact !== undefined", 120)
        assert "exact Δ logit-diff" in page.text_content("#circuit-note")
    assert abs(clicked - verified) <= 1e-3 * max(1.0, abs(verified))  # a whole rerun vs route attribution's restart
    assert events["errors"] == []


def test_the_pairs_circuit_and_one_edge_path_patched_are_the_librarys(smollm2_server):
    """Through the API: the page's default pair's circuit (after the page above drew it, the server's cached
    answer: one circuit for both tests, as a user's second look) and one settled edge path-patched alone."""
    import httpx

    pair = {
        "clean": "When Mary and John went to the store, John gave a drink to",
        "corrupt": "When Mary and John went to the store, Mary gave a drink to",
        "answer": " Mary",
        "wrong": " John",
    }
    with httpx.Client(base_url=smollm2_server.base, headers=smollm2_server.headers(), timeout=240) as client:
        r = client.post("/api/circuit", json=pair)
        assert r.status_code == 200, r.text
        d = r.json()
        assert 0 < len(d["edges"]) <= 40 and d["circuit"]["checks"]["full"]["max_abs_diff"] < 1e-4
        # an edge into a head's q, k or v that the circuit settled: path patching it alone gives the circuit's
        # exact Δ (ar.path_patch and ar.circuit measure an edge by one code path, read/circuits/runs.EdgeRun.measure)
        edge = next(e for e in d["edges"] if e["receiver"].get("channel") in ("q", "k", "v") and e["exact"] is not None)
        p = client.post("/api/path", json={**pair, "edge": edge["label"]}).json()
        bad = client.post("/api/path", json={**pair, "edge": "L1.H0>nowhere"})
    assert p["edge"] == edge["label"] and p["metric"] == "logit-diff"
    assert abs(p["exact"] - edge["exact"]) <= 1e-5 * max(1.0, abs(edge["exact"]))
    assert bad.status_code == 400 and "SENDER>RECEIVER" in bad.json()["error"]


SEEN = """() => { const t = document.querySelector("#token-text .tok[data-index='LAST']"),
  c = document.getElementById("token-text"), a = t.getBoundingClientRect(), b = c.getBoundingClientRect();
  return a.top >= b.top - 1 && a.bottom <= b.bottom + 1 && a.right <= window.innerWidth; }"""
WEIGHTS = """async () => { const P = await api("token", {text: S.text, index: SHE}), T = G.tokens.length;
  const m = AR.payloadMatrix(P.out), out = [];
  for (let r = 0; r < INFO.layers * INFO.heads; r++) out.push(m[r * T + MAYA]); return out; }"""
CLEAR_POINT = """() => { const svg = document.querySelector("SEL"), r = svg.getBoundingClientRect();
  const w = l => +l.getAttribute("stroke-width");
  const ls = [...svg.querySelectorAll("line.route")].sort((a, b) => w(b) - w(a));
  const at = (l, t) => { const c = n => +l.getAttribute(n); return [c("x1") + t * (c("x2") - c("x1")),
    c("y1") + t * (c("y2") - c("y1"))]; };
  const dist = (l, p) => { const c = n => +l.getAttribute(n), ax = c("x1"), ay = c("y1"), dx = c("x2") - ax,
    dy = c("y2") - ay, t = Math.max(0, Math.min(1, ((p[0] - ax) * dx + (p[1] - ay) * dy) / (dx * dx + dy * dy)));
    return Math.hypot(p[0] - ax - t * dx, p[1] - ay - t * dy); };
  for (const t of [0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8, 0.1, 0.9]) { const p = at(ls[0], t);
    if (ls.slice(1).every(o => dist(o, p) > 3))
      return [+ls[0].dataset.query, +ls[0].dataset.key, r.left + p[0], r.top + p[1]]; }
  throw new Error("no clear point on the strongest line"); }"""
WORDS = "river stone cloud table garden window paper music candle forest ladder mirror".split()


# a line, and more wrapped rows than the token box shows (250: 429 px of rows in a 320 px box; 400 and 1,000 took
# 23 and 33 s of CI for the same check)
@pytest.mark.parametrize("n", [20, 250])
def test_the_page_fits_its_window_at_real_sizes(smollm2_server, n):
    """n tokens (about): no horizontal overflow of the page, token rows wrap, the selected token in view — for
    250, scrolled into view inside a box that overflows."""
    text = " ".join(WORDS[i % len(WORDS)] for i in range(n - 1))
    with browser_page(smollm2_server.url) as (page, events):
        page.wait_for_selector("body[data-ready='idle']", state="attached")
        page.fill("#text", text)
        page.click("#run")
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=180_000)
        T = page.evaluate("G.tokens.length")
        assert abs(T - n) <= 2
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), "the page overflows"
        box = page.evaluate("(b => [b.scrollHeight, b.clientHeight])(document.getElementById('token-text'))")
        assert (box[0] > box[1]) == (n > 100), box  # the long text's rows overflow the box: the scroll is tested
        last = T - 2
        page.click(f"#token-text .tok[data-index='{last}']")
        wait_until(page, f"document.getElementById('token-card').dataset.token === '{last}'")
        seen = page.evaluate(SEEN.replace("LAST", str(last)))
        assert seen, "the selected token is out of view"
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert events["errors"] == []


def test_a_route_in_every_head_a_cut_drawn_as_cut_and_lines_hit_by_their_nearest_point(smollm2_server):
    text = "Maya handed the report to Jordan because she was leaving early."
    with browser_page(smollm2_server.url) as (page, events):
        page.wait_for_selector("body[data-ready='idle']", state="attached")
        page.fill("#text", text)
        page.click("#run")
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=60_000)
        toks = page.evaluate("G.tokens")
        she, maya = toks.index(" she"), toks.index("Maya") if "Maya" in toks else toks.index(" Maya")
        page.click(f"#token-text .tok[data-index='{she}']")
        wait_until(page, f"document.getElementById('token-card').dataset.token === '{she}'")
        page.click(f"#token-text .tok[data-index='{maya}']", modifiers=["Shift"])  # she → Maya in every head
        wait_until(page, f"document.getElementById('token-card').dataset.key === '{maya}'")
        assert "in every head" in page.text_content("#token-title") and "Maya" in page.text_content("#token-title")
        best = page.get_attribute("#token-best", "data-head")
        layer, head = (int(x) for x in best.split("."))
        # the named head is the one whose weight on she → Maya is largest: read every head's row from the API
        weights = page.evaluate(WEIGHTS.replace("SHE", str(she)).replace("MAYA", str(maya)))
        assert max(range(len(weights)), key=weights.__getitem__) == layer * 9 + head
        page.click("#token-effect")  # on demand: each head's estimated effect of cutting she → Maya
        wait_until(page, "document.getElementById('token-best').dataset.kind === 'effect'", 60)
        assert "estimated Δ p(" in page.text_content("#token-legend") + page.text_content("#token-best")

        page.click(f"#grid rect.cell[data-layer='{layer}'][data-head='{head}']")
        sel = f".panel[data-head='{layer}.{head}'] svg.links"
        page.wait_for_selector(f"{sel} line.route", state="attached", timeout=30_000)
        # a point on the strongest line at least 3 px from every other line: the nearest-point hit must pick it
        q, k, x, y = page.evaluate(CLEAR_POINT.replace("SEL", sel))
        hit = page.evaluate(f"() => document.querySelector({json.dumps(sel)}).nearestRoute({x}, {y})")
        assert (hit["q"], hit["k"]) == (q, k)
        page.mouse.click(x, y)
        wait_until(page, "document.querySelectorAll('#cuts li').length === 1")
        assert f"{q} " in page.text_content("#cuts li") and f"L{layer}.H{head}" in page.text_content("#cuts li")
        page.wait_for_selector(f"{sel} line.route.cut[data-query='{q}'][data-key='{k}']", state="attached")
        assert float(page.get_attribute("#server-time", "data-ms")) > 0  # the server's time for the request, shown
        page.keyboard.down("Alt")  # alt-click the same route: why it exists
        page.mouse.click(x, y)
        page.keyboard.up("Alt")
        wait_until(page, f"document.getElementById('why-card').dataset.route === '{layer}.{head}.{q}.{k}'", 60)
        assert page.locator("#why-pairs tr").count() == 13 and "difference" in page.text_content("#why-sum")
        assert page.locator("#why-graph line.why-pair").count() == 12  # the pairs drawn as a graph too
    assert events["errors"] == []
