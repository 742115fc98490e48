"""Route views past the attention sink: sinks are detected from the weight keys take (not assumed to be
token 0); when the top routes end there, the sink's share is said in one line and the routes to every other
key are ranked apart."""

from __future__ import annotations

import attnroute as ar
from attnroute.read.patching.sinks import SINK_SHARE, sink_said, sinks_of

IOI = "When Mary and John went to the store, John gave a drink to"


def test_a_sink_is_whichever_key_takes_the_weight():
    shares = {0: 0.05, 1: 0.02, 3: 0.61, 4: 0.1}  # the sink is key 3 here, not token 0
    routes = [{"key": 3, "estimate": 2.0}, {"key": 1, "estimate": -1.0}, {"key": 3, "estimate": 1.0}]
    sink = sinks_of(shares, routes, ["a", "b", "c", ".", "d"])
    assert sink["keys"] == [3] and sink["tokens"] == ["."] and sink["share_of_top"] == 0.75
    assert sinks_of(shares, [{"key": 1, "estimate": 1.0}], list("abcde")) is None  # no kept route ends there
    assert sinks_of({0: SINK_SHARE - 1e-3}, [{"key": 0, "estimate": 1.0}], ["a"]) is None
    assert "75% of the top 3 routes" in sink_said(sink, 3)


def test_smollm2s_top_routes_end_on_its_sink_and_the_content_routes_are_ranked_apart(smollm2, capsys):
    result = ar.routes(smollm2, IOI, answer=" Mary", wrong=" John", verify=2, no_checkpoint=True)
    r = result.to_dict()
    sink = r["sink"]
    assert 0 in sink["keys"] and all(w >= SINK_SHARE for w in sink["mean_weight"]) and sink["share_of_top"] > 0.5
    content = r["content_routes"]
    assert content and all(c["key"] not in sink["keys"] for c in content)
    sizes = [abs(c["estimate"]) for c in content]
    assert sizes == sorted(sizes, reverse=True) and len(content) == len(r["routes"])
    # the same estimate: a content route that was also kept overall has the same number
    kept = {(x["layer"], x["head"], x["query"], x["key"]): x["estimate"] for x in r["routes"]}
    for c in content:
        if (c["layer"], c["head"], c["query"], c["key"]) in kept:
            assert abs(kept[(c["layer"], c["head"], c["query"], c["key"])] - c["estimate"]) < 1e-6
    assert any("attention sink at key 0" in line for line in r["verdict"]["lines"])
    from attnroute.show.routes import routes_tables

    tables = routes_tables(result)
    assert len(tables) == 2 and "content routes" in tables[1].title and "<|im_start|>" in tables[1].title
