"""`report --add` checks what it is given before drawing it: sizes and values of every result kind (why
included), no bare NaN, nodes a residual stream has, and labels drawn in bounded time."""

from __future__ import annotations

import json
import time

import pytest

import attnroute as ar
from attnroute.errors import InputError
from attnroute.models import load
from attnroute.show import sections
from tests.read.zoo import build

PAIRS = [ar.PromptPair("the cat sat on the mat and", "the dog sat on the mat and", " the", " a")]
TEXT = "the cat sat on the mat . the cat sat on the"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    loaded = load(str(build("llama", tmp_path_factory.mktemp("trust"))))
    circuit = json.loads(ar.circuit(loaded, PAIRS, exact=0).to_json())
    why = json.loads(ar.why(loaded, TEXT, head="L1.H1", query="11", key="4").to_json())
    return {"circuit": circuit, "why": why}


def _add(tmp_path, data, text=None):
    path = tmp_path / "r.json"
    path.write_text(text if text is not None else json.dumps(data))
    return sections.load(str(path), "add")


def test_the_results_as_written_are_added(results, tmp_path):
    for kind in ("circuit", "why"):
        assert "<div" in _add(tmp_path, results[kind])


def test_a_grid_of_heads_no_model_has_is_refused_before_it_is_drawn(results, tmp_path):
    data = json.loads(json.dumps(results["circuit"]))
    data["meta"]["layers"] = data["meta"]["heads"] = 4095  # each under 4,096: a 16-million-cell figure
    with pytest.raises(InputError, match="layers × meta.heads"):
        _add(tmp_path, data)


def test_a_bare_nan_is_refused_naming_it(results, tmp_path):
    text = json.dumps(results["circuit"])
    assert '"exact": null' in text  # an unmeasured edge
    text = text.replace('"exact": null', '"exact": NaN', 1)  # what Python's json would read as a number
    with pytest.raises(InputError, match="bare NaN"):
        _add(tmp_path, None, text)


@pytest.mark.parametrize(
    "where, value, said",
    [
        ("sender", {"kind": "logits"}, "sender is a 'logits'"),
        ("receiver", {"kind": "banana"}, "receiver is a 'banana'"),
    ],
)
def test_an_edge_between_nodes_no_stream_has_is_refused(results, tmp_path, where, value, said):
    data = json.loads(json.dumps(results["circuit"]))
    data["rows"][0][where] = {**data["rows"][0][where], **value}  # the table (format 1: rows)
    with pytest.raises(InputError, match=said):
        _add(tmp_path, data)


def test_a_why_result_with_a_huge_label_is_refused_at_once_and_a_long_one_drawn_short(results, tmp_path):
    data = json.loads(json.dumps(results["why"]))
    data["rows"][0]["query_side"]["label"] = "x" * 3_000_000
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="label's length"):
        _add(tmp_path, data)
    assert time.perf_counter() - t0 < 5
    data["rows"][0]["query_side"]["label"] = "z" * 1_500  # the verdict names the largest pair: a long line
    t0 = time.perf_counter()
    html = _add(tmp_path, data)
    assert time.perf_counter() - t0 < 10 and "z" * 1_500 in html and "z" * 380 + "…" in html


def test_the_report_opens_on_the_head_an_added_result_names(tmp_path):
    """The report opened on L16.H0 whatever was added: now on the head the added result is about."""

    from types import SimpleNamespace as typed  # what named_head reads of a typed result

    from attnroute.show.sections import named_head, opening

    patch = typed(
        KIND="patch",
        rows=[
            {"layer": 9, "head": 6, "site": "head", "exact": 0.1, "normalized": 0.2},
            {"layer": 18, "head": 3, "site": "q", "exact": -0.3, "normalized": -0.7},
            {"layer": 20, "head": 1, "site": "head", "exact": None, "normalized": None},
            {"layer": 3, "head": 0, "site": "v", "exact": 0.5, "normalized": 0.9},  # a kv head: not a query head
        ],
    )
    assert named_head(patch) == [18, 3]
    routes = typed(KIND="routes", routes=[{"layer": 2, "head": 5, "stream": "cross"}, {"layer": 4, "head": 1}])
    assert named_head(routes) == [4, 1]
    why = typed(KIND="why", meta=typed(head="L3.H1"))
    assert named_head(why) == [3, 1] and named_head(typed(KIND="why", meta=typed(head="E2.H0"))) is None
    edge = {
        "exact": 1.0,
        "sender": {"kind": "embed"},
        "receiver": {"kind": "head", "layer": 7, "head": 2, "channel": "v"},
    }
    assert named_head(typed(KIND="circuit", edges=[edge])) == [7, 2]
    assert named_head(typed(KIND="knockout")) is None
    assert opening([routes, why, routes]) == [[4, 1], [3, 1]]  # in the order given, each head once
