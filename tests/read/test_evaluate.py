"""evaluate_circuit(): the faithfulness of any edge set, with circuit()'s checks — and the same numbers as
circuit()'s own curve where the edge set is one of its points."""

from __future__ import annotations

import numpy as np
import pytest

import attnroute as ar
from attnroute.errors import InputError
from attnroute.models import load

from .test_circuits import PAIRS
from .zoo import build


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load(str(build("llama", tmp_path_factory.mktemp("evaluate"))))


@pytest.fixture(scope="module")
def found(tiny):
    return ar.circuit(tiny, PAIRS, exact=0, faithfulness=0.5)


def test_the_chosen_circuit_and_every_curve_point_are_reproduced_from_their_labels(tiny, found):
    chosen = found.circuit["chosen"]
    again = ar.evaluate_circuit(tiny, PAIRS, found)  # a CircuitResult: its chosen circuit
    assert again.circuit["k"] == chosen["k"] and again.circuit["edges"] == chosen["labels"]
    # float32 forwards, divided by this pair's gap of 0.10: 1e-5, as every curve point below
    assert again.circuit["faithfulness"] == pytest.approx(chosen["faithfulness"], abs=1e-5)
    for point in found.circuit["curve"][1:-1]:
        got = ar.evaluate_circuit(tiny, PAIRS, found.top(point["k"])).circuit
        assert got["m"] == pytest.approx(point["m"], abs=1e-5), point["k"]
        if point["faithfulness"] is not None:
            assert got["faithfulness"] == pytest.approx(point["faithfulness"], abs=1e-5)


def test_the_full_set_is_the_clean_run_and_the_empty_set_the_corrupt_run(tiny, found):
    every = ar.evaluate_circuit(tiny, PAIRS, found.top(len(found.edges))).circuit
    none = ar.evaluate_circuit(tiny, PAIRS, []).circuit
    assert every["faithfulness"] == pytest.approx(1.0, abs=1e-5) and none["faithfulness"] == pytest.approx(0.0)
    for c in (every, none):
        assert c["checks"]["full"]["max_abs_diff"] < 1e-5 and c["checks"]["empty"]["max_abs_diff"] < 1e-5
    assert every["m"] == pytest.approx(every["checks"]["full"]["clean"], abs=1e-5)
    assert none["m"] == pytest.approx(none["checks"]["empty"]["corrupt"], abs=1e-5)


def test_mean_ablation_evaluates_with_its_own_empty_circuit(tiny):
    pairs = PAIRS[:1] * 2  # mean ablation needs two prompts of a length
    r = ar.evaluate_circuit(tiny, pairs, ["embed>logits"], ablation="mean").circuit
    assert "note" in r["checks"]["empty"] and r["checks"]["full"]["max_abs_diff"] < 1e-5
    assert np.isfinite(r["m"]) and r["k"] == 1


def test_a_pair_with_no_gap_gives_no_faithfulness_and_says_why(tiny):
    same = [ar.PromptPair("the cat sat on the mat and", "the cat sat on the mat and", " the", " a")]
    r = ar.evaluate_circuit(tiny, same, ["embed>logits"])
    assert r.circuit["faithfulness"] is None and "no gap" in r.circuit["reason"]
    assert "undefined" in r.to_dict()["verdict"]["lines"][0]


@pytest.mark.parametrize("edges", [["embed>L9.MLP"], ["nothing"], ["L1.H0>L0.MLP"]])
def test_edges_the_model_lacks_are_refused_naming_edges(tiny, edges):
    with pytest.raises(InputError) as e:
        ar.evaluate_circuit(tiny, PAIRS, edges)
    assert e.value.field == "edges" and "\n" not in str(e.value)


def test_unknown_fields_are_refused_not_dropped(tiny):
    with pytest.raises(InputError) as e:
        ar.evaluate_circuit(tiny, PAIRS, ["embed>logits"], faithfulness=0.9)  # a circuit() field, not this one's
    assert e.value.field == "faithfulness"


def test_arrays_index_the_edge_table_by_edge(found):
    arrays = found.arrays()
    assert arrays["estimate"].shape == (len(found.edges),)
    for r in found.edges[:20]:
        assert arrays["estimate"][r["edge"]] == r["estimate"]
        assert (np.isnan(arrays["exact"][r["edge"]]) and r["exact"] is None) or arrays["exact"][r["edge"]] == r["exact"]


def test_the_edge_graph_names_the_edges_a_circuit_result_indexes(tiny, found):
    graph = ar.edge_graph(tiny)
    labels = graph.labels()
    assert len(labels) == len(graph) == len(found.edges) == found.meta["edges"]
    for r in found.edges[:50]:
        assert labels[r["edge"]] == r["label"]
    first = ar.evaluate_circuit(tiny, PAIRS, labels[:3]).circuit
    assert first["k"] == 3 and first["edges"] == labels[:3]
