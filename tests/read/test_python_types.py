"""What Python callers pass is refused in one line naming the field, never a raw error from autograd or pathlib:
a metric cut from the model's graph, and why's routes given as data."""

from __future__ import annotations

import pytest

import attnroute as ar
from attnroute.errors import InputError
from attnroute.models import load

from .zoo import build

PAIRS = [ar.PromptPair("the cat sat on the mat and", "the dog sat on the mat and", " the", " a")]
TEXT = "the cat sat on the mat . the cat sat on the"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load(str(build("llama", tmp_path_factory.mktemp("types"))))


def _detached(logits, batch):
    return logits[:, -1, 0].detach()


def _numpy_round_trip(logits, batch):
    import torch

    return torch.tensor(logits[:, -1, 0].detach().numpy())


@pytest.mark.parametrize("metric", [_detached, _numpy_round_trip], ids=["detach", "numpy"])
@pytest.mark.parametrize("verb", ["patch", "routes", "circuit", "path_patch"])
def test_a_metric_cut_from_the_graph_is_refused_naming_metric(tiny, verb, metric):
    calls = {
        "patch": lambda: ar.patch(tiny, PAIRS, metric=metric, exact=0),
        "routes": lambda: ar.routes(tiny, prompts=PAIRS, metric=metric, layers=[0]),
        "circuit": lambda: ar.circuit(tiny, PAIRS, metric=metric, exact=0),
        "path_patch": lambda: ar.path_patch(tiny, PAIRS, metric=metric, sender="L0.H3", receiver="L1.H1", channel="k"),
    }
    with pytest.raises(InputError) as e:
        calls[verb]()
    assert e.value.field == "metric" and "graph" in str(e.value) and "\n" not in str(e.value)


def test_why_takes_routes_as_index_pairs_and_splits_them_as_query_and_key(tiny):
    pairs = ar.why(tiny, TEXT, head="L1.H1", routes=[(11, 4)]).to_dict()
    named = ar.why(tiny, TEXT, head="L1.H1", query="11", key="4").to_dict()
    assert pairs["score"] == named["score"] and pairs["sum"] == named["sum"] and pairs["pairs"] == named["pairs"]
    assert "the pairs given" in pairs["meta"]["said"]


@pytest.mark.parametrize("bad", [[(3,)], [(-1, 0)], [(1.5, 0)], [], 42, "   ", [(True, 0)]])
def test_routes_that_are_neither_a_name_a_file_nor_index_pairs_are_refused(tiny, bad):
    with pytest.raises(InputError) as e:
        ar.why(tiny, TEXT, head="L1.H1", routes=bad)
    assert e.value.field == "routes" and "\n" not in str(e.value)
