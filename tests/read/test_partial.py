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


def test_patch_settles_its_sites_jointly_and_says_each_round(tiny, tmp_path):
    """Under the settle rule every site's round shares one pass over the runs (53.3) and each round is said
    as the result so far (53.4): a value once measured never changes, and the last result is whole."""
    run = lambda p: ar.patch(tiny, PAIRS, sites=("head", "v"), positions="each", no_checkpoint=True, progress=p)  # noqa: E731
    parts, final = _partials(run)
    assert final.partial is None and "partial" not in final.to_dict()
    assert len(parts) >= 2 and all(e.result.partial["running"] for e in parts)
    assert all(e.result.meta.sites == ["head", "v"] for e in parts)
    measured = [sum(r["exact"] is not None for r in e.result.rows) for e in parts]
    assert measured == sorted(measured) and 0 < measured[0] < measured[-1]
    key = lambda r: (r["site"], r["layer"], r["head"], r["position"])  # noqa: E731
    last = {key(r): r["exact"] for r in final.rows}
    assert all(last[key(r)] == r["exact"] for e in parts for r in e.result.rows if r["exact"] is not None)
    for site, record in final.meta.exact.items():  # each site keeps its own rule and says it settled jointly
        assert "settled jointly" in record["rule"] and record["settled"], site
    path = tmp_path / "so-far.json"
    path.write_text(parts[0].result.to_json())
    back = ar.load(path)
    assert back.partial["running"] == ["head", "v"] and json.loads(back.to_json()) == json.loads(path.read_text())


def test_patch_with_exact_n_says_each_site_once_measured(tiny):
    parts, final = _partials(
        lambda p: ar.patch(tiny, PAIRS, sites=("head", "v"), exact=3, no_checkpoint=True, progress=p)
    )
    assert [e.result.partial for e in parts] == [{"done": ["head"], "pending": ["v"]}]
    head = parts[0].result
    assert head.meta.sites == ["head"] and head.rows == [r for r in final.rows if r["site"] == "head"]


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


def _cli(tmp_path, tiny, *extra) -> tuple[list[str], object]:
    prompts = tmp_path / "pairs.jsonl"
    rows = [{"clean": p.clean, "corrupt": p.corrupt, "answer": p.answer, "wrong": p.wrong} for p in PAIRS]
    prompts.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "p.json"
    argv = ["patch", "--model", tiny, "--prompts", str(prompts), "--sites", "head,v", "--json", str(out)]
    return [*argv, "--no-checkpoint", *extra], out


def _patching():
    import sys

    import attnroute.read.patching.patch  # noqa: F401  (the package binds the function `patch` over the module)

    return sys.modules["attnroute.read.patching.patch"]


def test_a_patch_stopped_after_its_first_site_leaves_that_site_in_its_json(tiny, tmp_path, monkeypatch, capsys):
    patching = _patching()
    real, calls = patching._settle, []

    def stop_at_the_second_site(pool, comps, store, site, s, say):
        calls.append(site)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(pool, comps, store, site, s, say)

    monkeypatch.setattr(patching, "_settle", stop_at_the_second_site)
    argv, out = _cli(tmp_path, tiny, "--exact", "3")
    assert main(argv) == 130
    data = json.loads(out.read_text())
    assert data["partial"] == {"done": ["head"], "pending": ["v"]} and {r["site"] for r in data["rows"]} == {"head"}
    err = capsys.readouterr().err
    assert "head: top 10 by |normalized|" in err  # the site's table, printed when it was measured


def test_a_settling_patch_stopped_midway_leaves_its_rounds_so_far(tiny, tmp_path, monkeypatch):
    patching = _patching()
    real, calls = patching._measure_sites, []

    def stop_in_the_second_round(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(patching, "_measure_sites", stop_in_the_second_round)
    argv, out = _cli(tmp_path, tiny, "--positions", "each")
    assert main(argv) == 130
    data = json.loads(out.read_text())
    assert data["partial"]["running"] == ["head", "v"]
    assert 0 < sum(r["exact"] is not None for r in data["rows"]) < len(data["rows"])


def test_routes_say_their_estimates_before_the_exact_checks(tiny):
    parts, final = _partials(
        lambda p: ar.routes(
            tiny, "the cat sat on the mat and the", metric="loss", verify=3, no_checkpoint=True, progress=p
        )
    )
    assert [e.result.partial for e in parts] == [{"done": ["estimate"], "pending": ["verify"]}]
    estimated = parts[0].result
    assert all(r["exact"] is None for r in estimated.routes) and any(r["exact"] is not None for r in final.routes)
    assert [r["estimate"] for r in estimated.routes] == [r["estimate"] for r in final.routes]
