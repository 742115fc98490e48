"""Long runs are resumable without being asked: patch, circuit and corpus reads checkpoint to attnroute's
cache, keyed by what changes their numbers; a rerun of the same command resumes and says so in one line;
--no-checkpoint keeps nothing; the cache is bounded and `attnroute cache list|clear` shows and empties it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import attnroute as ar
from attnroute.cli import main
from attnroute.errors import InputError
from attnroute.read.ground import runs

from .test_provenance import _described
from .zoo import build

ROWS = [("the cat sat on the mat and", "the dog sat on the mat and"), ("we saw a film and", "we saw a play and")]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build("llama", tmp_path_factory.mktemp("ckcache"))


def _prompts(tmp_path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "".join(json.dumps({"clean": c, "corrupt": x, "answer": " the", "wrong": " a"}) + "\n" for c, x in ROWS)
    )
    return path


def _stop_on_second_round(monkeypatch, verb):
    module = __import__(f"attnroute.read.{'patching' if verb == 'patch' else 'circuits'}.runs", fromlist=["x"])
    cls = module.PairRun if verb == "patch" else module.EdgeRun
    real, calls = cls.measure, []

    def stopped(self, *args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "measure", stopped)


@pytest.mark.parametrize("verb", ["patch", "circuit"])
def test_ctrl_c_without_a_checkpoint_keeps_the_work_and_a_rerun_resumes_it(
    model_dir, tmp_path, monkeypatch, verb, capsys
):
    base = [verb, "--model", str(model_dir), "--prompts", str(_prompts(tmp_path)), "--exact", "12"]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert main([*base, "--no-checkpoint", "--json", str(one)]) == 0
    assert runs.entries() == []  # --no-checkpoint: nothing kept
    _stop_on_second_round(monkeypatch, verb)
    assert main(base) == 130
    err = capsys.readouterr().err
    assert "attnroute's cache" in err and "rerun the same command to resume" in err
    kept = runs.entries()
    assert len(kept) == 1 and kept[0]["verb"] == verb and kept[0]["model"] == str(model_dir)
    folder = runs.runs_dir()
    monkeypatch.undo()
    monkeypatch.setenv("ATTNROUTE_RUNS", str(folder))  # undo() took the test's cache folder away too
    assert main([*base, "--json", str(two)]) == 0
    err = capsys.readouterr().err
    assert sum("resuming from" in line for line in err.splitlines()) == 1, err
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert b["meta"]["resumed"] is not None and _described(a) == _described(b)


def test_a_cached_checkpoint_that_cannot_be_resumed_is_started_over_in_one_line(model_dir, tmp_path, capsys):
    s = ar.PatchSettings(model=str(model_dir), prompts=str(_prompts(tmp_path)), exact=4)
    path = runs.default_checkpoint("patch", s)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a checkpoint")
    events = []
    result = ar.patch(settings=s, progress=events.append)
    said = [e.message for e in events if e.stage == "checkpoint"]
    assert len(said) == 1 and said[0].startswith("starting over") and result.meta.resumed is None
    assert ar.patch(settings=s).meta.resumed is not None  # the file it wrote instead resumes


def test_what_changes_the_numbers_names_another_file_and_what_does_not_the_same(model_dir, tmp_path):
    prompts = str(_prompts(tmp_path))
    s = ar.PatchSettings(model=str(model_dir), prompts=prompts)
    assert runs.default_checkpoint("patch", s) == runs.default_checkpoint(
        "patch", ar.PatchSettings(model=str(model_dir), prompts=prompts)
    )
    assert runs.default_checkpoint("patch", s) != runs.default_checkpoint(
        "patch", ar.PatchSettings(model=str(model_dir), prompts=prompts, top=3)
    )
    assert runs.default_checkpoint("circuit", s) != runs.default_checkpoint("patch", s)
    before = runs.default_checkpoint("patch", s)
    Path(prompts).write_text(Path(prompts).read_text() + "\n")
    os.utime(prompts, ns=(1, 1))
    assert runs.default_checkpoint("patch", s) != before  # the prompts file changed
    assert (
        runs.default_checkpoint("patch", ar.PatchSettings(model=str(model_dir), prompts=prompts, metric=lambda *a: 0))
        is None
    )


def test_checkpoint_and_no_checkpoint_together_are_refused():
    with pytest.raises(InputError) as e:
        ar.PatchSettings(prompts="ioi", checkpoint="c.ck", no_checkpoint=True)
    assert e.value.field == "no_checkpoint"


@pytest.mark.parametrize("settings", [ar.PatchSettings, ar.CircuitSettings, ar.RoutesSettings, ar.CorpusSettings])
@pytest.mark.parametrize("bad", [False, True, 3, ["c.ck"]])
def test_a_checkpoint_that_is_not_a_path_is_refused_by_name(settings, bad):
    # checkpoint=False read as "keep none" is a natural guess from Python; it was a TypeError deep in the study
    asked = {"corpus": "c.txt"} if settings is ar.CorpusSettings else {"prompts": "ioi"}
    with pytest.raises(InputError) as e:
        settings(**asked, checkpoint=bad)
    assert e.value.field == "checkpoint" and repr(bad) in str(e.value)
    assert ("no_checkpoint=True" in str(e.value)) == (bad is False)


PATH_FIELDS = [  # every settings field that names a file or folder, with what the class needs beside it
    (ar.CorpusSettings, "corpus", {}),
    (ar.CorpusSettings, "checkpoint", {"corpus": "c.txt"}),
    (ar.SimulateSettings, "requests", {}),
    (ar.InductionSettings, "save", {}),
]


@pytest.mark.parametrize(("settings", "name", "beside"), PATH_FIELDS)
@pytest.mark.parametrize("bad", [3.5, True, ["a.txt"]])
def test_a_path_field_given_no_path_is_refused_by_name_before_any_work(settings, name, beside, bad):
    # a float or a list reached open() and was a TypeError traceback (corpus=3.5, requests=3.5)
    with pytest.raises(InputError) as e:
        settings(**beside, **{name: bad})
    assert e.value.field == name and repr(bad) in str(e.value)
    settings(**beside, **{name: Path("some") / "where"})  # a pathlib.Path is a path


def test_a_corpus_field_that_is_not_a_name_is_refused():
    with pytest.raises(InputError) as e:
        ar.CorpusSettings(corpus="c.txt", field=3)
    assert e.value.field == "field" and "got 3" in str(e.value)


def _fake_run(name: str, size: int, age: int) -> Path:
    folder = runs.runs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"patch-{name}{runs.SUFFIX}"
    path.write_bytes(b"x" * size)
    (folder / f"patch-{name}.json").write_text(json.dumps({"verb": "patch", "model": "m"}))
    os.utime(path, (age, age))
    return path


def test_the_cache_is_bounded_oldest_first_and_never_the_running_file():
    old, mid, new = _fake_run("a", 400, 1_000), _fake_run("b", 400, 2_000), _fake_run("c", 400, 3_000)
    assert runs.prune(keep=old, limit=900) == [mid]  # over the bound: the oldest go first, but not the one kept
    assert old.exists() and new.exists() and not mid.exists() and not mid.with_suffix(".json").exists()


def test_cache_list_and_clear_keep_a_run_in_progress(capsys):
    from attnroute.read.ground.checkpoint import exclusive

    done, running = _fake_run("done", 10, 1_000), _fake_run("running", 10, 2_000)
    assert main(["cache", "list", "--json", "-"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [Path(r["file"]).name for r in listed["runs"]] == [running.name, done.name]
    assert listed["limit_bytes"] == runs.LIMIT_BYTES
    with exclusive(running):
        assert main(["cache", "clear"]) == 0
        assert "1 in use by a running command, kept" in " ".join(capsys.readouterr().err.split())
        assert running.exists() and not done.exists()
    assert main(["cache", "clear"]) == 0 and runs.entries() == []


def test_a_corpus_read_resumes_from_the_cache(model_dir, tmp_path, capsys):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("the cat sat on the mat and looked at the dog.\n\nwe saw a film and then a play.\n")
    args = ["heads", "--model", str(model_dir), "--corpus", str(corpus), "--exact", "2", "--no-verify"]
    assert main(args) == 0 and len(runs.entries()) == 1
    capsys.readouterr()
    assert main(args) == 0
    assert "resuming from" in capsys.readouterr().err


def test_routes_resume_their_verified_routes_after_ctrl_c(model_dir, tmp_path, monkeypatch, capsys):
    import sys

    import attnroute.read.patching.route_attribution  # noqa: F401  (the module, not the function it exports)

    ra = sys.modules["attnroute.read.patching.route_attribution"]

    base = ["routes", "the cat sat on the mat . the cat sat on the", "--model", str(model_dir), "--metric", "loss"]
    base += ["--top", "8", "--verify", "6"]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert main([*base, "--no-checkpoint", "--json", str(one)]) == 0 and runs.entries() == []
    real, calls = ra.knockout_one, []

    def stopped(*args, **kwargs):
        calls.append(1)
        if len(calls) > 6:  # the second settle round: the first round's 6 routes are measured and saved
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(ra, "knockout_one", stopped)
    assert main(base) == 130
    assert "route attribution stopped" in " ".join(capsys.readouterr().err.split()) and len(runs.entries()) == 1
    monkeypatch.setattr(ra, "knockout_one", real)
    assert main([*base, "--json", str(two)]) == 0
    assert "resuming from" in capsys.readouterr().err
    assert _described(json.loads(one.read_text())) == _described(json.loads(two.read_text()))


def test_a_routes_checkpoint_is_not_resumed_into_routes_kept_in_another_order(model_dir, tmp_path, monkeypatch):
    """The exact effects are stored by position in the kept list. A run whose routes came out in another order
    (the same model read in other arithmetic ranks them otherwise) resumed the first run's numbers into the wrong
    routes (SmolLM2: exact effects cycled among five routes). The key holds the kept routes: it starts over."""
    import sys

    import attnroute.read.patching.route_attribution  # noqa: F401  (the module, not the function it exports)

    ra = sys.modules["attnroute.read.patching.route_attribution"]
    run = dict(metric="loss", top=8, verify=8, progress=False)
    text, named = "the cat sat on the mat . the cat sat on the", str(tmp_path / "routes.ckpt")
    first = ar.routes(str(model_dir), text, **run)  # checkpointed to the cache
    ar.routes(str(model_dir), text, checkpoint=named, **run)
    real = ra.stream_routes

    def reordered(*args, **kwargs):
        routes, *rest = real(*args, **kwargs)
        return (routes[1:] + routes[:1], *rest)  # the same routes, ranked otherwise

    monkeypatch.setattr(ra, "stream_routes", reordered)
    with pytest.raises(InputError, match="checkpoint"):  # a file the user named: refused, never misread
        ar.routes(str(model_dir), text, checkpoint=named, **run)
    again = ar.routes(str(model_dir), text, **run)  # the cache's: started over
    exact = {(r["layer"], r["head"], r["query"], r["key"]): r["exact"] for r in first.routes}
    assert all(r["exact"] == pytest.approx(exact[(r["layer"], r["head"], r["query"], r["key"])]) for r in again.routes)


def test_the_python_names_of_the_cache_command():
    _fake_run("x", 5, 1_000)
    assert ar.cache_list() == runs.entries() and len(ar.cache_list()) == 1
    removed, busy = ar.cache_clear()
    assert len(removed) == 1 and busy == [] and ar.cache_list() == []


def test_a_later_rank_finds_the_cache_folder_to_lock_its_file_in(model_dir, tmp_path, monkeypatch):
    """Under torchrun every rank locks its own file in the cache before the weights load: the folder must
    exist for rank 1 too, whoever comes first."""
    from attnroute.read.study import Study

    monkeypatch.setenv("ATTNROUTE_RUNS", str(tmp_path / "not-yet"))
    st = Study(ar.CorpusSettings(model=str(model_dir), corpus=str(_prompts(tmp_path))), kind="corpus")
    st.rank = 1
    path, cached = st._checkpoint_base()
    assert cached and path.parent.is_dir() and runs.entries() == []  # rank 1 describes and prunes nothing
