"""Every stream's mask is the mask: a route the model's own mask forbids — a key after a causal query, a key
beyond a sliding window — is refused by name, or where it exists in some layers only, said; never a cut of
nothing reported as an effect of 0.000."""

from __future__ import annotations

import pytest

import attnroute as ar
from attnroute.errors import InputError
from attnroute.models import load

from .zoo import WINDOW, build

FAR = "cat a b c d e f g h i j k the"  # 'the' → 'cat': 12 tokens apart, the windows are 6


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    d = tmp_path_factory.mktemp("masked")
    return {arch: load(str(build(arch, d))) for arch in ("mistral", "gemma3_text", "llama")}


def test_a_knockout_of_a_route_beyond_every_window_is_refused(zoo):
    """Mistral windows every layer: the cut changed nothing and was reported as +0.000."""
    assert WINDOW < 12
    with pytest.raises(InputError) as e:
        ar.knockout(zoo["mistral"], FAR, source="the", target="cat", window=1)
    assert e.value.field == "target" and "every layer's mask forbids it" in str(e.value)


def test_a_knockout_of_a_route_outside_some_windows_says_where_it_does_not_exist(zoo):
    r = ar.knockout(zoo["gemma3_text"], FAR, source="the", target="cat", window=1).to_dict()
    said = [line for line in r["verdict"]["lines"] if "does not exist" in line]
    assert said and r["resolved"]["mask"]["absent_layers"] == [0]  # the sliding layer; the global one holds it
    plain = ar.knockout(zoo["llama"], FAR, source="the", target="cat", window=1).to_dict()
    assert "mask" not in plain["resolved"]


def test_why_refuses_a_route_beyond_the_heads_window(zoo):
    with pytest.raises(InputError) as e:
        ar.why(zoo["mistral"], FAR, head="L1.H0", query="the", key="cat")
    assert e.value.field == "key" and "window" in str(e.value)


def test_the_explorer_refuses_a_cut_of_a_route_beyond_the_window(zoo):
    from starlette.testclient import TestClient

    from attnroute.serve.app import build as app_of
    from attnroute.serve.explorer import Explorer
    from attnroute.settings import ServeSettings
    from attnroute.show.explorer import page_html

    explorer = Explorer(zoo["mistral"])
    app = app_of(explorer, ServeSettings(model=zoo["mistral"]), "t", page_html(explorer.info()), hosts=["testserver"])
    with TestClient(app, headers={"X-Attnroute-Token": "t"}) as c:
        far = {"kind": "route", "layer": 1, "head": 0, "query": 13, "key": 1}
        r = c.post("/api/cut", json={"text": FAR, "cuts": [far]})
        assert r.status_code == 400 and "beyond layer 1's window" in r.json()["error"]
        near = c.post("/api/cut", json={"text": FAR, "cuts": [{**far, "key": 10}]})
        assert near.status_code == 200
