"""The explorer's API against a live `attnroute serve --model smollm2`: the token on every request, no CORS,
bad requests refused in one line while the server keeps serving, and numbers equal to the library's."""

from __future__ import annotations

import json
import re

import httpx
import pytest

import attnroute as ar

TEXT = "Maya handed the report to Jordan because she was leaving early today."
ROUTES = ["/", "/health", "/api/info", "/api/progress?id=x"]
POSTS = ["/api/text", "/api/head", "/api/token", "/api/cut", "/api/pair", "/api/verify", "/api/report"]


@pytest.fixture(scope="module")
def client(smollm2_server):
    with httpx.Client(base_url=smollm2_server.base, headers=smollm2_server.headers(), timeout=120) as c:
        yield c


def post(client, path, body):
    return client.post(path, json=body)


@pytest.mark.parametrize("token", [None, "", "wrong", "x" * 43])
def test_no_token_or_a_wrong_one_gets_401_and_nothing_else(smollm2_server, token):
    headers = {} if token is None else {"X-Attnroute-Token": token}
    with httpx.Client(base_url=smollm2_server.base, headers=headers, timeout=30) as c:
        for path in ROUTES:
            r = c.get(path)
            assert r.status_code == 401 and set(r.json()) == {"error"}, path
        for path in POSTS:
            r = c.post(path, json={"text": TEXT})
            assert r.status_code == 401 and "token" in r.json()["error"], path
        r = c.get("/", params={"token": token or ""})
        assert r.status_code == 401 and "<script" not in r.text


def test_the_token_opens_the_page_with_the_reports_policy(smollm2_server):
    r = httpx.get(smollm2_server.url, timeout=30)
    assert r.status_code == 200 and "attnroute explorer" in r.text
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert r.headers["referrer-policy"] == "no-referrer"  # the token in the URL is never sent on
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", r.text)
    assert not any(s in r.text for s in ("<script src", "<link ", "@import", "url(http"))  # nothing from a CDN


def test_another_origin_gets_no_cors_permission(smollm2_server, client):
    evil = {"Origin": "http://evil.example"}
    r = client.post("/api/info", headers=evil)
    assert "access-control-allow-origin" not in {k.lower() for k in r.headers}
    pre = client.options(
        "/api/text", headers={**evil, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x"}
    )
    assert pre.status_code in (401, 405) and not any(k.lower().startswith("access-control") for k in pre.headers)
    r = client.get("/api/info", headers=evil)
    assert r.status_code == 200 and "access-control-allow-origin" not in {k.lower() for k in r.headers}
    # a form post (no preflight) cannot carry the JSON the API needs
    r = client.post("/api/text", content="text=hi", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415
    # DNS rebinding: a page on another name that resolves here is refused by the Host check
    r = client.get("/api/info", headers={"Host": "evil.example"})
    assert r.status_code == 400


def test_no_request_can_name_a_file(client):
    for path in ("/../../etc/passwd", "/static/../../etc/passwd", "/api/report/../../etc/passwd", "/etc/passwd"):
        r = client.get(path)
        assert r.status_code in (400, 404, 405) and "root:" not in r.text
    for field in ("path", "out", "file", "model"):
        r = post(client, "/api/report", {"text": TEXT, field: "/tmp/x.html"})
        assert r.status_code == 400 and f"unknown field(s) ['{field}']" in r.json()["error"]


BAD = [
    ("/api/text", b"{not json", 400, "not JSON"),
    ("/api/text", b"[1, 2]", 400, "expected a JSON object"),
    ("/api/text", json.dumps({"text": 3}).encode(), 400, "text: expected a non-empty string"),
    ("/api/text", json.dumps({"text": "   "}).encode(), 400, "non-empty"),
    ("/api/text", json.dumps({}).encode(), 400, "needs ['text']"),
    (
        "/api/head",
        json.dumps({"text": TEXT, "layer": 30, "head": 0}).encode(),
        400,
        "layer: expected an integer in 0 … 29",
    ),
    (
        "/api/head",
        json.dumps({"text": TEXT, "layer": 0, "head": 9}).encode(),
        400,
        "head: expected an integer in 0 … 8",
    ),
    ("/api/head", json.dumps({"text": TEXT, "layer": "3", "head": 0}).encode(), 400, "got '3'"),
    ("/api/head", json.dumps({"text": TEXT, "layer": True, "head": 0}).encode(), 400, "got True"),
    ("/api/token", json.dumps({"text": TEXT, "index": 10_000}).encode(), 400, "index: expected a token position"),
    ("/api/token", json.dumps({"text": TEXT, "index": -1}).encode(), 400, "index"),
    ("/api/cut", json.dumps({"text": TEXT, "cuts": "all"}).encode(), 400, "cuts: expected a list"),
    ("/api/cut", json.dumps({"text": TEXT, "cuts": [{"kind": "burn"}]}).encode(), 400, "cut 0: expected"),
    (
        "/api/cut",
        json.dumps({"text": TEXT, "cuts": [{"kind": "route", "layer": 0, "head": 0, "query": 2, "key": 5}]}).encode(),
        400,
        "key 5 comes after query 2",
    ),
    ("/api/cut", json.dumps({"text": TEXT, "cuts": [], "target": " Paris is"}).encode(), 400, "give one token"),
    ("/api/text", json.dumps({"text": "word " * 2000}).encode(), 413, "this server reads at most 1024"),
    ("/api/text", json.dumps({"text": "x" * 1_000_000}).encode(), 413, "at most 262,144 are read"),
]


@pytest.mark.parametrize(("path", "body", "status", "said"), BAD, ids=[f"{p}:{s}:{m[:20]}" for p, _, s, m in BAD])
def test_bad_requests_get_a_4xx_in_one_line_and_the_server_keeps_serving(client, path, body, status, said):
    r = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    msg = r.json()["error"]
    assert said in msg and "\n" not in msg and "Traceback" not in msg
    assert client.get("/health").json()["status"] == "ok"


def test_an_html_payload_comes_back_as_data(client):
    evil = "Hi <img src=x onerror=alert(1)> and </script><script>alert(2)</script>"
    r = post(client, "/api/text", {"text": evil})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert "".join(r.json()["tokens"]).replace(" ", "").find("<img") >= 0  # tokens, as text, for textContent


def test_a_route_cut_equals_attnroute_knockout_exactly(client, smollm2):
    grid = post(client, "/api/text", {"text": TEXT}).json()
    T = len(grid["tokens"])
    for layer, head, key in ((17, 5, 6),):  # one knockout: 30 windows × 2 forwards
        cut = {"kind": "route", "layer": layer, "head": head, "query": T - 1, "key": key}
        r = post(client, "/api/cut", {"text": TEXT, "cuts": [cut]}).json()
        ko = ar.knockout(smollm2, TEXT, source=str(T - 1), target=str(key), window=1, heads=[head])
        assert abs(r["before"]["p"] - ko.p_clean) <= 1e-6
        # knockout runs its windows as copies of the text in batched forwards, the page one forward: the same
        # cut, summed in another order over 30 fp32 layers (2e-6 in p measured on SmolLM2 prompts)
        assert abs(r["after"]["p"] - ko.p_route[layer]) <= 1e-5
        assert r["target"]["id"] == ko.target_id
    # a head cut is ZeroHead: here run on the eager path, the explorer takes the fused kernel where no cut is (1e-6)
    import torch

    from attnroute.read.stimuli import encode_text

    r = post(client, "/api/cut", {"text": TEXT, "cuts": [{"kind": "head", "layer": 0, "head": 0}]}).json()
    ids, _ = encode_text(smollm2.tokenizer, TEXT, None)
    with torch.no_grad(), ar.read_routed(smollm2, interventions=[ar.ZeroHead([0], layer=0)], impl="eager"):
        logits = smollm2.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, -1].float()
    p = float(torch.softmax(logits, -1)[r["target"]["id"]])
    # float32 over 30 layers by two kernels: 1.0e-6 apart on an AVX2 machine
    assert abs(r["after"]["p"] - p) <= 1e-5 and r["cuts"] == 1 and abs(r["after"]["p"] - r["before"]["p"]) > 1e-5


def test_head_and_token_weights_are_the_models_own(client, smollm2):
    """/api/head and /api/token carry the weights of the library's capture, to the log code's ±2.8 %."""
    import numpy as np

    from attnroute.read.capture import capture_weights
    from attnroute.read.stimuli import encode_text
    from attnroute.show.weights import decode

    ids, _ = encode_text(smollm2.tokenizer, TEXT, None)
    ref = capture_weights(smollm2, ids)
    P = post(client, "/api/head", {"text": TEXT, "layer": 4, "head": 7}).json()
    got = decode(np.frombuffer(__import__("base64").b64decode(P["codes"]), np.uint8)).reshape(P["Tq"], P["T"])
    want = ref[4][7]
    keep = want >= 1e-6
    assert np.all(np.abs(got[keep] / want[keep] - 1) <= 0.028) and np.all(got[~keep] == 0)
    tok = post(client, "/api/token", {"text": TEXT, "index": 5}).json()
    out = decode(np.frombuffer(__import__("base64").b64decode(tok["out"]["codes"]), np.uint8)).reshape(30, 9, -1)
    into = decode(np.frombuffer(__import__("base64").b64decode(tok["into"]["codes"]), np.uint8)).reshape(30, 9, -1)
    w = np.stack(ref)  # (L, H, T, T)
    for got, want in ((out, w[:, :, 5, :]), (into, w[:, :, :, 5])):
        keep = want >= 1e-6
        assert np.all(np.abs(got[keep] / want[keep] - 1) <= 0.028)


def test_results_are_cached_and_the_page_saves_an_offline_report(client):
    first = post(client, "/api/text", {"text": TEXT})
    again = post(client, "/api/text", {"text": TEXT})
    assert again.status_code == 200 and again.headers["x-attnroute-cache"] == "hit" and again.content == first.content
    # the page sends each request with its own progress id: the same question is still the cached answer
    paged = post(client, "/api/text", {"text": TEXT, "job": "j-another-click"})
    assert paged.headers["x-attnroute-cache"] == "hit" and paged.content == first.content
    r = post(client, "/api/report", {"text": TEXT})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "attachment" in r.headers["content-disposition"] and "Routing report" in r.text


def test_the_saved_report_keeps_the_chosen_target_and_speaks_the_explorers_words(client):
    cuts = [{"kind": "head", "layer": 3, "head": 1}]
    r = post(client, "/api/report", {"text": TEXT, "cuts": cuts, "target": " She"})
    assert r.status_code == 200
    said = r.text[r.text.index('id="explorer-cuts"') :][:4000]
    assert "p(&#x27; She&#x27;)" in said or "p(' She')" in said, said[:600]
    assert "--no-ablation" not in r.text  # the explorer's words, not a flag its user never gave
    cut = post(client, "/api/cut", {"text": TEXT, "cuts": cuts, "target": " She"}).json()
    assert f"{cut['metric']['before']:.6f} before, {cut['metric']['after']:.6f} after" in said


def test_why_a_route_exists_is_the_library_s_split(client, smollm2):
    r = post(client, "/api/why", {"text": TEXT, "layer": 6, "head": 2, "query": 9, "key": 2})
    assert r.status_code == 200, r.text
    d = r.json()
    want = ar.why(smollm2, TEXT, head="L6.H2", query="9", key="2", top=12).to_dict()
    assert abs(d["score"] - want["score"]) <= 1e-5 and abs(d["difference"]) <= 1e-4 * max(1.0, abs(d["score"]))
    assert [p["term"] for p in d["pairs"]] == pytest.approx([p["term"] for p in want["pairs"]], rel=1e-5, abs=1e-7)
    masked = post(client, "/api/why", {"text": TEXT, "layer": 6, "head": 2, "query": 2, "key": 9})
    assert masked.status_code == 422 and "mask forbids" in masked.json()["error"]


def test_a_routes_estimated_effect_in_every_head_is_route_attributions(client, smollm2):
    """The token card's on-demand effect of one route in every head equals route attribution's estimate
    of that route (metric p(target) at the last position), and its weight the head's own."""
    top = ar.route_attribution(smollm2, TEXT, metric="prob", answer=" Maya", top=12, verify=0).to_dict()["routes"]
    r = top[0]
    got = post(client, "/api/effect", {"text": TEXT, "query": r["query"], "key": r["key"], "target": " Maya"}).json()
    assert got["metric"] == "p(' Maya')"
    est, w = got["estimate"][r["layer"]][r["head"]], got["weights"][r["layer"]][r["head"]]
    assert est == pytest.approx(r["estimate"], rel=2e-3, abs=1e-6) and w == pytest.approx(r["weight"], rel=2e-3)
    later = post(client, "/api/effect", {"text": TEXT, "query": 2, "key": 5, "target": " Maya"})
    assert later.status_code == 400 and "no such route" in later.json()["error"]


SURROGATE_BODIES = {
    "/api/text": {},
    "/api/head": {"layer": 0, "head": 0},
    "/api/token": {"index": 1},
    "/api/why": {"layer": 0, "head": 0, "query": "1", "key": "0"},
}


@pytest.mark.parametrize("path", SURROGATE_BODIES)
def test_a_lone_surrogate_is_a_400_naming_the_text_and_the_server_serves_on(client, path):
    body = {"text": "the cat \ud800 sat", **SURROGATE_BODIES[path]}
    raw = json.dumps(body)  # valid JSON ("\\ud800" escaped), not text a tokenizer reads; httpx cannot encode it
    r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "surrogate" in r.json()["error"] and "text" in r.json()["error"]
    assert post(client, "/api/text", {"text": TEXT}).status_code == 200
