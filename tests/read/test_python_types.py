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


SURROGATE = "the cat \ud800 sat on the mat and"


@pytest.mark.parametrize(
    "verb",
    [
        lambda m: ar.read_heads(m, SURROGATE),
        lambda m: ar.knockout(m, SURROGATE, source="cat", target="the"),
        lambda m: ar.why(m, SURROGATE, head="L1.H0", query="1", key="0"),
        lambda m: ar.patch(m, [{"clean": SURROGATE, "corrupt": "the dog x sat on the mat and"}], metric="loss"),
        lambda m: ar.patch(m, [ar.PromptPair("the cat sat", "the dog sat", " the", " \udfff")]),
    ],
    ids=["heads", "knockout", "why", "patch prompt", "patch answer"],
)
def test_a_lone_surrogate_is_refused_naming_the_field_before_the_tokenizer(tiny, verb):
    """'\\ud800' is valid in JSON and in a Python string, not in UTF-8: the tokenizer raised on it."""
    with pytest.raises(InputError) as e:
        verb(tiny)
    assert "surrogate" in str(e.value) and e.value.field in ("text", "prompts") and "\n" not in str(e.value)


def test_a_prompts_file_with_a_lone_surrogate_is_refused_in_one_line(tiny, tmp_path, capsys):
    from attnroute.cli import main

    f = tmp_path / "p.jsonl"
    f.write_text('{"clean": "the cat \\ud800 sat", "corrupt": "the dog x sat", "answer": " the", "wrong": " a"}\n')
    assert main(["patch", "--model", tiny.model.name_or_path, "--prompts", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "row 1 clean holds a lone surrogate" in err[0]


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["patch", "--clean", "the cat sat", "--corrupt", "the dog sat"],
            "--metric logit-diff reads next-token logits",
        ),
        (["circuit", "--clean", "the cat sat", "--corrupt", "the dog sat"], "--metric logit-diff reads next-token"),
        (["routes", "the cat sat on the mat", "--metric", "cosine"], "give your own metric of the pooled embedding"),
        (["routes", "the cat sat on the mat", "--metric", "loss"], "give your own metric of the pooled embedding"),
    ],
    ids=["patch default", "circuit default", "routes cosine", "routes loss"],
)
def test_on_an_encoder_the_metric_is_named_first_with_what_fits_an_encoder(argv, said, capsys, no_model_load):
    """An encoder asked for the default metric was told to give --answer; routes with cosine was told to use
    loss (a causal LM's) and with loss to use cosine. The metric is checked against the model's kind first."""
    from attnroute.cli import main

    assert main([*argv, "--model", "minilm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "--answer" not in err[0] and "causal LM" not in err[0], err
    assert not ("cosine" in argv and "use cosine" in err[0]) and not ("loss" in argv and "use loss" in err[0])
