"""A result applied where it was not made is refused by name: why's routes file indexes the tokens (and the
model) routes ran on; on another text its positions would name other tokens and be split without a word."""

from __future__ import annotations

import pytest

import attnroute as ar
from attnroute.errors import InputError
from attnroute.models import load

from .zoo import build

TEXT = "the cat sat on the mat . the cat sat on the"
OTHER = "a dog ran to the park and then a dog ran to the"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("provenance")
    loaded = load(str(build("llama", d)))
    routes = ar.routes(loaded, TEXT, metric="loss", layers=[1], top=30, verify=0)
    path = d / "routes.json"
    path.write_text(routes.to_json())
    heads = {(r["layer"], r["head"]) for r in routes.routes}
    return loaded, path, next(f"L{layer}.H{h}" for layer, h in sorted(heads))


def test_the_routes_of_this_text_are_split(made):
    loaded, path, head = made
    r = ar.why(loaded, TEXT, head=head, routes=str(path)).to_dict()
    assert r["meta"]["routes"] >= 1 and abs(r["difference"]) < 1e-4 * max(1.0, abs(r["score"]))


def test_routes_made_on_another_text_are_refused_naming_routes(made):
    loaded, path, head = made
    with pytest.raises(InputError) as e:
        ar.why(loaded, OTHER, head=head, routes=str(path))
    assert e.value.field == "routes" and "other tokens" in str(e.value) and "\n" not in str(e.value)


def test_routes_made_with_another_model_are_refused_naming_it(made, tmp_path):
    _, path, head = made
    other = load(str(build("qwen2", tmp_path)))
    with pytest.raises(InputError) as e:
        ar.why(other, TEXT, head=head, routes=str(path))
    assert e.value.field == "routes" and "made with llama" in str(e.value)


TIMING = ("timings_s", "seconds", "resumed")


def _described(data):
    """A result's JSON less what is about the run itself (its timings, that it resumed)."""
    if isinstance(data, dict):
        return {k: _described(v) for k, v in data.items() if not any(t in k for t in TIMING)}
    if isinstance(data, list):
        return [_described(v) for v in data]
    return data


@pytest.mark.parametrize("verb", ["patch", "circuit"])
def test_a_resumed_run_describes_itself_as_the_uninterrupted_one_does(made, tmp_path, monkeypatch, verb):
    """A circuit resumed after Ctrl-C had the same numbers, but its meta.estimate, verdict and qk_fix said the
    QK fix was not applied: the checkpoint now keeps what the estimating run applied."""
    import json

    from attnroute.cli import main

    loaded, _, _ = made
    module = __import__(f"attnroute.read.{'patching' if verb == 'patch' else 'circuits'}.runs", fromlist=["x"])
    cls = module.PairRun if verb == "patch" else module.EdgeRun
    prompts = tmp_path / "pairs.jsonl"
    rows = [("the cat sat on the mat and", "the dog sat on the mat and"), ("we saw a film and", "we saw a play and")]
    prompts.write_text(
        "".join(json.dumps({"clean": c, "corrupt": x, "answer": " the", "wrong": " a"}) + "\n" for c, x in rows)
    )
    base = [verb, "--model", loaded.model.name_or_path, "--prompts", str(prompts), "--exact", "12"]
    one, two, ck = tmp_path / "one.json", tmp_path / "two.json", tmp_path / "c.ck"
    assert main([*base, "--json", str(one)]) == 0
    real, calls = cls.measure, []

    def stopped(self, *args, **kwargs):
        if len(calls) >= 1:  # the second round of exact measurement: Ctrl-C
            raise KeyboardInterrupt
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "measure", stopped)
    assert main([*base, "--checkpoint", str(ck)]) == 130 and ck.exists()
    monkeypatch.undo()
    assert main([*base, "--checkpoint", str(ck), "--json", str(two)]) == 0
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b["meta"]["resumed"] is not None
    assert _described(a) == _described(b)
