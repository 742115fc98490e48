"""A prompt set under torchrun (two gloo ranks equal one process) and resumed from --checkpoint."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnroute.cli import main
from attnroute.models import load
from attnroute.read.patching import patch

from .zoo import build

ROWS = [
    ("the cat sat on the mat and", "the dog sat on the mat and"),
    ("a bird flew over the house and", "a bird ran over the house and"),
    ("my friend likes the red car and", "my friend likes the blue car and"),
    ("we saw a film and", "we saw a play and"),
    ("she read the old book and", "she read the new book and"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    t = tmp_path_factory.mktemp("ranks")
    path = build("llama", t / "zoo")
    prompts = t / "pairs.jsonl"
    prompts.write_text(
        "".join(json.dumps({"clean": c, "corrupt": x, "answer": " the", "wrong": " a"}) + "\n" for c, x in ROWS)
    )
    return path, load(str(path)), prompts


def _argv(model, prompts, out, *extra):
    return [
        "patch",
        "--model",
        str(model),
        "--prompts",
        str(prompts),
        "--sites",
        "head,v",
        "--exact",
        "all",
        "--json",
        str(out),
        *extra,
    ]


def _values(path) -> dict:
    d = json.loads(Path(path).read_text())
    return d, {(r["site"], r["layer"], r["head"]): r for r in d["rows"]}


def test_two_gloo_ranks_equal_one_process(tiny, tmp_path):
    model, _, prompts = tiny
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    assert main(_argv(model, prompts, tmp_path / "one.json")) == 0
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node", "2"]
    done = subprocess.run(
        [*torchrun, "-m", "attnroute", *_argv(model, prompts, tmp_path / "two.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    one, a = _values(tmp_path / "one.json")
    two, b = _values(tmp_path / "two.json")
    assert two["meta"]["ranks"] == 2 and one["meta"]["ranks"] == 1
    assert two["meta"]["m_clean_values"] == pytest.approx(one["meta"]["m_clean_values"], abs=1e-5)
    for key, ra in a.items():
        assert b[key]["values"] == pytest.approx(ra["values"], abs=1e-5), key
        assert b[key]["estimate_values"] == pytest.approx(ra["estimate_values"], abs=1e-5), key
        assert b[key]["normalized"] == pytest.approx(ra["normalized"], abs=1e-5), key
    assert two["direct"]["rows"][0]["clean_values"] == pytest.approx(one["direct"]["rows"][0]["clean_values"], abs=1e-5)


def test_an_interrupted_run_resumes_from_its_checkpoint_and_measures_nothing_twice(tiny, tmp_path, monkeypatch):
    _, loaded, prompts = tiny
    ck = tmp_path / "patch.ck"
    full = patch(loaded, str(prompts), sites=("head", "v"), exact="all").to_dict()
    runs = importlib.import_module("attnroute.read.patching.runs")
    real = runs.PairRun.measure

    def ctrl_c_at_the_values(self, comps):  # the heads are done and saved; Ctrl-C when v starts
        if comps[0].site == "v":
            raise KeyboardInterrupt
        return real(self, comps)

    monkeypatch.setattr(runs.PairRun, "measure", ctrl_c_at_the_values)
    from attnroute import Interrupted

    with pytest.raises(Interrupted, match="rerun the same command to resume") as stop:
        patch(loaded, str(prompts), sites=("head", "v"), exact="all", checkpoint=str(ck))
    assert ck.exists() and stop.value.resume == str(ck)
    measured = []
    monkeypatch.setattr(runs.PairRun, "measure", lambda self, comps: measured.extend(comps) or real(self, comps))
    again = patch(loaded, str(prompts), sites=("head", "v"), exact="all", checkpoint=str(ck)).to_dict()
    assert again["meta"]["resumed"]["components_measured"] == 2 * 4  # every head of the 2 layers
    assert measured and {c.site for c in measured} == {"v"}  # what was saved is not run again
    for ra, rb in zip(full["rows"], again["rows"]):
        assert rb["values"] == pytest.approx(ra["values"], abs=1e-6)


def test_a_checkpoint_of_other_prompts_is_refused(tiny, tmp_path):
    _, loaded, prompts = tiny
    ck = tmp_path / "ck"
    patch(loaded, str(prompts), exact=2, checkpoint=str(ck))
    from attnroute import InputError

    with pytest.raises(InputError, match="written by another command"):
        patch(loaded, str(prompts), exact=2, checkpoint=str(ck), direction="noising")
    ck.write_bytes(b"garbage")
    with pytest.raises(InputError, match="damaged"):
        patch(loaded, str(prompts), exact=2, checkpoint=str(ck))
