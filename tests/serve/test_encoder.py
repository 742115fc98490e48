"""The explorer on an encoder (MiniLM), in-process through Starlette's TestClient: the grid, a head, a cut
measured as the cosine of the pooled sentence embedding; prompt pairs refused with the reason."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from attnroute.serve.app import build
from attnroute.serve.explorer import Explorer
from attnroute.settings import ServeSettings
from attnroute.show.explorer import page_html

TEXT = "A short sentence about routing, and a second clause."


@pytest.fixture(scope="module")
def client(minilm):
    explorer = Explorer(minilm)
    app = build(explorer, ServeSettings(model=minilm), "t0ken", page_html(explorer.info()), hosts=["testserver"])
    with TestClient(app, headers={"X-Attnroute-Token": "t0ken"}) as c:
        yield c


def test_an_encoder_reads_cuts_and_refuses_pairs(client):
    info = client.get("/api/info").json()
    assert info["kind"] == "encoder" and info["max_tokens"] == 512 and info["routing_check"]
    grid = client.post("/api/text", json={"text": TEXT}).json()
    assert grid["top"] is None and len(grid["roles"]) == 6 and grid["tokens"][0] == "[CLS]"
    head = client.post("/api/head", json={"text": TEXT, "layer": 2, "head": 3}).json()
    assert head["Tq"] == head["T"] == len(grid["tokens"])
    # bidirectional: a key after its query is a route here
    route = {"kind": "route", "layer": 0, "head": 0, "query": 1, "key": 5}
    cut = client.post("/api/cut", json={"text": TEXT, "cuts": [route, {"kind": "head", "layer": 5, "head": 1}]})
    m = cut.json()["metric"]
    assert cut.status_code == 200 and m["before"] == 1.0 and 0.5 < m["after"] < 1.0 and m["delta"] < 0
    r = client.post("/api/pair", json={"clean": "a b", "corrupt": "a c", "answer": "b", "wrong": "c"})
    assert r.status_code == 400 and "causal LM" in r.json()["error"]
    assert client.get("/health", headers={"X-Attnroute-Token": "nope"}).status_code == 401


def test_verify_on_an_encoder_is_refused_not_measured(client):
    """A logit difference needs a causal LM: on an encoder it is a 400 naming why, never a number read off
    the sentence embedding, never a 500."""
    route = {"layer": 0, "head": 0, "query": 1, "key": 2}
    r = client.post("/api/verify", json={"clean": "a b", "corrupt": "a c", "answer": "b", "wrong": "c", "route": route})
    assert r.status_code == 400 and "causal LM" in r.json()["error"] and "\n" not in r.json()["error"]


ROUTE = {"kind": "route", "layer": 0, "head": 0, "query": 1, "key": 5}
EVERY_ENDPOINT = {
    "/api/text": {"text": TEXT},
    "/api/head": {"text": TEXT, "layer": 1, "head": 0},
    "/api/token": {"text": TEXT, "index": 2},
    "/api/cut": {"text": TEXT, "cuts": [ROUTE]},
    "/api/pair": {"clean": "a b", "corrupt": "a c", "answer": "b", "wrong": "c"},
    "/api/verify": {"clean": "a b", "corrupt": "a c", "answer": "b", "wrong": "c", "route": ROUTE},
    "/api/report": {"text": TEXT, "cuts": [ROUTE]},
    "/api/why": {"text": TEXT, "layer": 1, "head": 0, "query": 3, "key": 2},
    "/api/circuit": {"clean": "a b", "corrupt": "a c", "answer": "b", "wrong": "c"},
    "/api/effect": {"text": TEXT, "query": 3, "key": 2},
    "/api/path": {"clean": "a b", "corrupt": "a c", "answer": "b", "wrong": "c", "edge": "embed>logits"},
}


@pytest.mark.parametrize("path", EVERY_ENDPOINT)
def test_every_endpoint_works_on_an_encoder_or_says_why_never_a_500(client, path):
    """/api/effect answered 500 (no logits on an encoder); /api/why built L1.H0 where encoders name E1.H0."""
    r = client.post(path, json=EVERY_ENDPOINT[path])
    assert r.status_code < 500, (path, r.status_code, r.text[:300])
    if r.status_code >= 400:
        said = r.json()["error"]
        assert said and "\n" not in said and "Traceback" not in said
    if path == "/api/why":  # the head as the encoder names it, split through its frozen LayerNorms
        assert r.status_code == 200 and r.json()["verdict"]["lines"][0].startswith("E1.H0:")
    if path == "/api/effect":  # an encoder has no next token: said, with what to do instead
        assert r.status_code == 422 and "cut the route" in r.json()["error"]
