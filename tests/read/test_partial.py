"""Partial results that stream (issue 53.4): patch says each site and each settle round as the result so far,
circuit each stage; the CLI writes each to --json as it finishes (valid JSON, marked partial until the end)
and prints a site's table when the site is settled, so a run stopped midway leaves what it measured."""

from __future__ import annotations

import json

import pytest

import attnroute as ar
from attnroute.cli import main
from tests.read.zoo import build

PAIRS = (
    ar.PromptPair("the cat sat on the mat and", "the dog sat on the mat and", " the", " a"),
    ar.PromptPair("a bird flew over the house and", "a bird ran over the house and", " the", " a", row=2),
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(build("llama", tmp_path_factory.mktemp("partial")))


def _partials(run) -> tuple[list, object]:
    events = []
    result = run(events.append)
    return [e for e in events if e.stage == "partial"], result


def test_patch_says_each_site_and_round_and_the_last_result_is_whole(tiny, tmp_path):
    parts, final = _partials(lambda p: ar.patch(tiny, PAIRS, sites=("head", "v"), no_checkpoint=True, progress=p))
    assert final.partial is None and "partial" not in final.to_dict()
    settled = [e.result for e in parts if e.result.partial == {"done": ["head"], "pending": ["v"]}]
    assert len(settled) == 1  # the head site settled, v pending: said once
    head = settled[0]
    assert head.meta.sites == ["head"] and {r["site"] for r in head.rows} == {"head"}
    want = [r for r in final.rows if r["site"] == "head"]
    assert head.rows == want  # the numbers of a settled site never change after it is said
    rounds = [e.result for e in parts if "running" in e.result.partial]
    assert {r.partial["running"] for r in rounds} == {"head", "v"}  # every settle round of each site said
    assert all(r.meta.sites == [*r.partial["done"], r.partial["running"]] for r in rounds)
    path = tmp_path / "so-far.json"
    path.write_text(head.to_json())
    back = ar.load(path)
    assert back.partial == {"done": ["head"], "pending": ["v"]} and json.loads(back.to_json()) == json.loads(
        head.to_json()
    )


def test_nothing_is_built_for_a_listener_that_takes_no_results(tiny):
    """The default progress (lines on stderr) and progress=False get the line, never a result built for it."""
    lines = []

    class Lines:
        wants_partial = False

        def __call__(self, event):
            lines.append(event)

    ar.patch(tiny, PAIRS, sites=("head",), no_checkpoint=True, progress=Lines())
    partial = [e for e in lines if e.stage == "partial"]
    assert partial and all(e.result is None for e in partial)
    assert all("result" not in e.to_dict() for e in lines)


def test_circuit_says_each_stage(tiny):
    parts, final = _partials(lambda p: ar.circuit(tiny, PAIRS, exact=4, ig_steps=1, no_checkpoint=True, progress=p))
    assert [e.result.partial["done"] for e in parts] == [["estimate", "settle"], ["estimate", "settle", "curve"]]
    settled, curved = (e.result for e in parts)
    assert settled.circuit == {} and curved.circuit["curve"] == final.circuit["curve"]
    assert [r["exact"] for r in settled.edges] == [r["exact"] for r in final.edges]
    assert curved.circuit["chosen"] == final.circuit["chosen"]  # indices into the rows, mapped once each


def test_a_patch_stopped_after_its_first_site_leaves_that_site_in_its_json(tiny, tmp_path, monkeypatch, capsys):
    import sys

    import attnroute.read.patching.patch  # noqa: F401  (the package binds the function `patch` over the module)

    patching = sys.modules["attnroute.read.patching.patch"]
    real, calls = patching._settle, []

    def stop_at_the_second_site(pool, comps, store, site, s, say, after=None):
        calls.append(site)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(pool, comps, store, site, s, say, after=after)

    monkeypatch.setattr(patching, "_settle", stop_at_the_second_site)
    out = tmp_path / "p.json"
    prompts = tmp_path / "pairs.jsonl"
    rows = [{"clean": p.clean, "corrupt": p.corrupt, "answer": p.answer, "wrong": p.wrong} for p in PAIRS]
    prompts.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    argv = ["patch", "--model", tiny, "--prompts", str(prompts), "--sites", "head,v", "--json", str(out)]
    assert main([*argv, "--no-checkpoint"]) == 130
    data = json.loads(out.read_text())
    assert data["partial"] == {"done": ["head"], "pending": ["v"]} and {r["site"] for r in data["rows"]} == {"head"}
    err = capsys.readouterr().err
    assert "head: top 10 by |normalized|" in err  # the settled site's table, when it was settled
