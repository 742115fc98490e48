"""Results that reload (issue 53.5): ar.load(path) gives back the typed result a verb wrote — its JSON
identical when written again — and refuses a file of another format, an unstamped file, or a kind not
asked for, in one line naming the field. Every table is `rows`; the old keys are aliases one release;
`exact` is the measured value (null where only estimated) in every table."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pytest

import attnroute as ar
from attnroute.engine.jsonable import FORMAT, STAMP, Result
from attnroute.errors import InputError
from attnroute.show.results import BY_KIND, CLASSES
from tests.read.zoo import build

TEXT = "the cat sat on the mat . the cat sat on the"
PAIRS = (
    ar.PromptPair("the cat sat on the mat and", "the dog sat on the mat and", " the", " a"),
    ar.PromptPair("a bird flew over the house and", "a bird ran over the house and", " the", " a", row=2),
)
QUIET = {"progress": False}
VERBS = {
    "patch": lambda m: ar.patch(m, PAIRS, exact=3, sites=("head", "v"), no_checkpoint=True, **QUIET),
    "patch-positions": lambda m: ar.patch(m, PAIRS, exact=2, sites=("head",), positions="each", **QUIET),
    "routes": lambda m: ar.routes(m, "the cat sat on the mat and the", metric="loss", layers=[0], **QUIET),
    "circuit": lambda m: ar.circuit(m, PAIRS, exact=4, ig_steps=1, no_checkpoint=True, **QUIET),
    "path_patch": lambda m: ar.path_patch(m, PAIRS, sender="L0.H3", receiver="L1.H1", channel="k", **QUIET),
    "evaluate_circuit": lambda m: ar.evaluate_circuit(m, PAIRS, ["embed>L1.H1.q", "L0.H3>logits"], **QUIET),
    "why": lambda m: ar.why(m, TEXT, head="L1.H1", query="11", key="4", **QUIET),
    "composition": lambda m: ar.composition(m, **QUIET),
    "knockout": lambda m: ar.knockout(
        m, TEXT, source="cat", target="mat", window=1, metric="prob", answer=" mat", **QUIET
    ),
    "swap": lambda m: ar.swap(m, TEXT, "the dog sat on the mat . the dog sat on the", window=1, heads=[0, 1], **QUIET),
    "needle": lambda m: ar.needle(m, (48,), **QUIET),
    "heads": lambda m: ar.read_heads(m, TEXT, exact=0, ablation=False, **QUIET),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Every text verb run once on a tiny Llama, its result and the JSON file it wrote."""
    d = tmp_path_factory.mktemp("reload")
    model = ar.load_model(str(build("llama", d)))
    out = {}
    for name, run in VERBS.items():
        result = run(model)
        path = d / f"{name}.json"
        path.write_text(result.to_json())
        out[name] = (result, path)
    return out


@pytest.mark.parametrize("name", VERBS)
def test_every_result_reloads_as_its_type_and_writes_the_same_json(written, name):
    result, path = written[name]
    back = ar.load(path)
    assert type(back) is type(result)
    assert json.loads(back.to_json()) == json.loads(path.read_text())
    assert json.loads(path.read_text())[STAMP] == {"result": result.KIND, "format": FORMAT}


def test_typed_fields_come_back_typed(written):
    patch, path = written["patch-positions"]
    back = ar.load(path)
    assert type(back.meta) is type(patch.meta) and back.meta.sites == ["head"]
    for site, grid in patch.grid.items():  # the grids are not written: rebuilt from the rows, the same
        assert grid.ndim == 3
        np.testing.assert_array_equal(back.grid[site], grid)
    heads, path = written["heads"]
    table = ar.load(path)
    for c in ("entropy", "sink_mass", "prev_token"):  # as written: rounded to 6 decimals
        np.testing.assert_allclose(table.columns[c], heads.columns[c], atol=6e-7, equal_nan=True)
    assert table.roles == heads.roles
    assert [x[:2] for x in table.top("entropy", 3)] == [x[:2] for x in heads.top("entropy", 3)]
    comp, path = written["composition"]
    np.testing.assert_allclose(ar.load(path).scores["q"], comp.scores["q"], equal_nan=True)
    knock, path = written["knockout"]
    again = ar.load(path)
    assert again.windows == knock.windows and again.metric["name"] == "prob"
    assert [tuple(h) for h in ar.load(written["needle"][1]).retrieval_heads] == ar.load(
        written["needle"][1]
    ).retrieval_heads


def test_every_table_is_rows_and_the_old_keys_stay_one_release_as_aliases(written):
    old = {
        "routes": "routes",
        "circuit": "edges",
        "knockout": "windows",
        "swap": "layers",
        "needle": "lengths",
        "why": "pairs",
    }
    for name, key in old.items():
        data = json.loads(written[name][1].read_text())
        assert data["rows"] == data[key] and len(data["rows"]) > 0, name
    assert "rows" in json.loads(written["patch"][1].read_text())


def test_exact_is_the_measured_value_in_every_table(written):
    """patch rows said exact: true; circuit edges and routes gave the number. Now every table gives the
    measured Δ (null where only estimated), and patch's delta is that same number."""
    patch = json.loads(written["patch"][1].read_text())["rows"]
    measured = [r for r in patch if r["exact"] is not None]
    assert 0 < len(measured) < len(patch)
    assert all(isinstance(r["exact"], float) and r["exact"] == r["delta"] for r in measured)
    assert all(r["delta"] is None for r in patch if r["exact"] is None)
    for name in ("circuit", "routes"):
        rows = json.loads(written[name][1].read_text())["rows"]
        assert any(isinstance(r["exact"], float) for r in rows) and not any(isinstance(r["exact"], bool) for r in rows)


def test_a_file_of_another_format_or_unstamped_or_another_kind_is_refused_by_name(written, tmp_path):
    data = json.loads(written["patch"][1].read_text())
    cases = {
        "old": ({k: v for k, v in data.items() if k != STAMP}, "before result format 1"),
        "future": ({**data, STAMP: {"result": "patch", "format": FORMAT + 1}}, f"format {FORMAT + 1}"),
        "alien": ({**data, STAMP: {"result": "banana", "format": FORMAT}}, "'banana'"),
    }
    for name, (content, said) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(content))
        with pytest.raises(InputError) as e:
            ar.load(path)
        assert said in str(e.value) and "\n" not in str(e.value) and e.value.field == "path"
    with pytest.raises(InputError) as e:
        ar.load(written["patch"][1], kinds=("circuit",))
    assert "a patch result; expected one of circuit" in str(e.value)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**data, "meta": {**data["meta"], "surprise": 1}}))
    with pytest.raises(InputError) as e:  # a field its class does not know: refused, not dropped
        ar.load(broken)
    assert "surprise" in str(e.value)


def test_every_result_class_is_known_to_load_by_a_kind_of_its_own():
    def subclasses(c):
        return set(c.__subclasses__()).union(*(subclasses(s) for s in c.__subclasses__()))

    import attnroute.check.audit  # noqa: F401  (every result class imported)
    import attnroute.learn  # noqa: F401
    import attnroute.read.speech  # noqa: F401

    assert subclasses(Result) == set(CLASSES)
    assert len(BY_KIND) == len(CLASSES) and all(c.KIND for c in CLASSES)
    for c in CLASSES:  # the table a TABLE names is a field, or one from_dict rebuilds
        assert c.TABLE is None or c.from_dict is not Result.from_dict or c.TABLE in {f.name for f in fields(c)}


def test_a_check_run_and_a_learn_result_reload(tmp_path):
    from attnroute.check.audit import audit

    run = audit(target="torch.sdpa", only=("causal", "empty_rows"))
    path = tmp_path / "check.json"
    path.write_text(run.to_json())
    back = ar.load(path)
    assert type(back) is type(run) and back.passed == run.passed
    assert json.loads(back.to_json()) == json.loads(path.read_text())
    learned = ar.LearnResult(
        "induction", {"steps": 3}, {"kind": "x", "lines": ["a"]}, {"n": 1}, {"curves": {"loss": [1.0]}}
    )
    path = tmp_path / "learn.json"
    path.write_text(learned.to_json())
    assert ar.load(path).to_dict() == learned.to_dict()
