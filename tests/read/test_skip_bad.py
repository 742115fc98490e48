"""Prompt files across models: a row this model cannot run (clean and corrupt tokenized to unequal lengths,
an answer of several tokens) stops the file — or, with skip_bad, is left out, counted and listed with its
reason, on every verb that reads prompt pairs; a file with no row left is refused."""

from __future__ import annotations

import json

import pytest

import attnroute as ar
from attnroute.cli import main
from attnroute.errors import InputError
from attnroute.models import load

from .zoo import build

GOOD = [("the cat sat on the mat and", "the dog sat on the mat and"), ("we saw a film and", "we saw a play and")]
BAD = ("the cat sat on the mat and", "the hippopotamus sat on the mat and")  # more tokens on one side


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load(str(build("llama", tmp_path_factory.mktemp("skip"))))


def _file(tmp_path, rows) -> str:
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "".join(json.dumps({"clean": c, "corrupt": x, "answer": " the", "wrong": " a"}) + "\n" for c, x in rows)
    )
    return str(path)


VERBS = {
    "patch": lambda m, p, **k: ar.patch(m, p, exact=4, **k),
    "circuit": lambda m, p, **k: ar.circuit(m, p, exact=4, **k),
    "routes": lambda m, p, **k: ar.routes(m, prompts=p, metric="logit-diff", top=4, verify=1, **k),
    "path_patch": lambda m, p, **k: ar.path_patch(m, p, sender="L0.H0", receiver="L1.H0", channel="q", **k),
    "evaluate_circuit": lambda m, p, **k: ar.evaluate_circuit(m, p, edges=["L0.H0>L1.H0.q"], **k),
}


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_bad_row_stops_the_file_unless_skipped_and_then_it_is_listed(tiny, tmp_path, verb):
    rows = [GOOD[0], BAD, GOOD[1]] if verb != "routes" else [GOOD[0], BAD, GOOD[0]]  # routes: one length
    path = _file(tmp_path, rows)
    with pytest.raises(InputError) as e:
        VERBS[verb](tiny, path, no_checkpoint=True) if verb in ("patch", "circuit", "routes") else VERBS[verb](
            tiny, path
        )
    assert "row 2" in str(e.value) and "differ in length" in str(e.value)
    kw = {"no_checkpoint": True} if verb in ("patch", "circuit", "routes") else {}
    meta = VERBS[verb](tiny, path, skip_bad=True, **kw).to_dict()["meta"]
    assert meta["n_prompts"] == 2
    (skipped,) = meta["skipped"]
    assert skipped["row"] == 2 and "differ in length" in skipped["reason"]


def test_every_row_skipped_is_refused(tiny, tmp_path):
    with pytest.raises(InputError) as e:
        ar.patch(tiny, _file(tmp_path, [BAD, BAD]), skip_bad=True)
    assert "every one of the 2 prompt rows was skipped" in str(e.value) and e.value.field == "prompts"


def test_without_skip_bad_the_json_has_no_skipped_key(tiny, tmp_path):
    assert "skipped" not in ar.patch(tiny, _file(tmp_path, GOOD), exact=4, no_checkpoint=True).to_dict()["meta"]


def test_the_command_line_skips_and_says_so(tiny, tmp_path, capsys):
    path = _file(tmp_path, [GOOD[0], BAD, GOOD[1]])
    out = tmp_path / "p.json"
    args = ["patch", "--model", tiny.model.name_or_path, "--prompts", path, "--exact", "4", "--no-checkpoint"]
    assert main([*args, "--skip-bad", "--json", str(out)]) == 0
    assert "skipped 1 of 3 prompt rows (skip_bad): rows 2" in " ".join(capsys.readouterr().err.split())
    assert json.loads(out.read_text())["meta"]["skipped"][0]["row"] == 2
    assert main(args) == 2


def test_two_clips_refuse_skip_bad():
    with pytest.raises(InputError) as e:
        ar.CircuitSettings(audio_clean="paris", audio_corrupt="rome", skip_bad=True)
    assert e.value.field == "skip_bad"
