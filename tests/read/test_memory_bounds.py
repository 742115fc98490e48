"""Work sized to memory: prompts cut into runs of bounded tokens (the same numbers whatever the cut), kept
runs within a byte budget, route attribution refused past its token budget with the estimate, and result
files checked for their sizes before `report --add` allocates anything from them."""

from __future__ import annotations

import functools
import importlib
import json

import pytest
import torch

import attnroute as ar
from attnroute.cli import main
from attnroute.errors import InputError
from attnroute.models import load
from attnroute.promptset import PromptPair
from attnroute.read.ground import pool as pool_module
from attnroute.read.ground.prompts import tokenize_pairs

from .zoo import build

# the modules (the package re-exports functions of the same names)
study_module = importlib.import_module("attnroute.read.study")
routes_module = importlib.import_module("attnroute.read.patching.route_attribution")

WORDS = ["cat", "dog", "bird", "fish", "cow", "hen", "fox", "owl"]
PAIRS = [
    PromptPair(f"the {a} sat on the mat and", f"the {b} sat on the mat and", " the", " a", row=i + 1)
    for i, (a, b) in enumerate(zip(WORDS, WORDS[1:] + WORDS[:1], strict=True))
] + [PromptPair("a bird flew over the big house and", "a bird ran over the big house and", " the", " a", row=9)]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return load(str(build("llama", tmp_path_factory.mktemp("zoo"))))


def test_runs_hold_at_most_their_tokens_and_keep_every_prompt_in_order(tiny_llama):
    groups, _ = tokenize_pairs(tiny_llama.tokenizer, tiny_llama.kind, PAIRS, "logit-diff")
    for budget in (1, 7, 16, 40, 10_000):
        chunks = pool_module.chunk_groups(groups, budget)
        for c in chunks:  # a run is one prompt, or fits the budget
            assert len(c.rows) == 1 or len(c.rows) * c.length <= budget
            assert len(c.rows) == c.clean.shape[0] == c.corrupt.shape[0] == len(c.answer)
        assert [r for c in chunks for r in c.rows] == [r for g in groups for r in g.rows]


def test_the_pool_keeps_runs_within_its_budget_and_remakes_the_rest():
    made = []
    make = lambda c: made.append(c) or f"run {c}"  # noqa: E731
    pool = pool_module.RunPool(make, [0, 1, 2, 3], keep_bytes=25, bytes_of=lambda run: 10)
    for i in range(4):
        assert pool.get(i) == f"run {i}"
        pool.done(i)
    assert len(pool.kept) == 2 and pool.made == 4  # two fit 25 bytes; the other two were dropped
    for i in range(4):  # a second round: the kept ones are not recorded again, the dropped ones are
        pool.get(i)
        pool.done(i)
    assert pool.made == 6


def test_a_run_the_pool_lets_go_is_freed_before_the_next_is_recorded():
    """The caller's loop variable still names the last run while the next one is made: a run not kept is
    emptied by done(), so its recordings are gone by then, and a use after it fails loudly."""
    import weakref

    class Run(pool_module.Recorded):
        def __init__(self, c):
            self.x = torch.ones(1000) * c

    alive = []

    def make(c):
        alive.append(all(ref() is None for ref in refs))  # every earlier run's tensor freed by now
        return Run(c)

    refs: list = []
    pool = pool_module.RunPool(make, [0, 1, 2], keep_bytes=0)
    for i in range(3):
        run = pool.get(i)
        refs.append(weakref.ref(run.x))
        pool.done(i)
    assert alive == [True, True, True] and not pool.kept
    with pytest.raises(AttributeError):
        run.x  # noqa: B018
    kept = pool_module.RunPool(Run, [5], keep_bytes=1 << 20)  # within the budget: kept whole
    kept.get(0)
    kept.done(0)
    assert float(kept.get(0).x[0]) == 5.0


def test_patch_gives_the_same_numbers_whatever_the_runs_and_the_budget(tiny_llama, monkeypatch):
    """Nine prompts as one run each, nothing kept between rounds: every number equals the one-batch run."""
    whole = ar.patch(tiny_llama, PAIRS, metric="logit-diff", exact="all", sites=("head", "v"))
    # the run object cuts the runs and keeps them (read/study.py): one token per run, nothing kept
    monkeypatch.setattr(study_module, "chunk_groups", lambda groups, max_tokens: pool_module.chunk_groups(groups, 1))
    monkeypatch.setattr(study_module, "RunPool", functools.partial(pool_module.RunPool, keep_bytes=0))
    cut = ar.patch(tiny_llama, PAIRS, metric="logit-diff", exact="all", sites=("head", "v"))
    assert len(whole.rows) == len(cut.rows) > 0
    for a, b in zip(whole.rows, cut.rows, strict=True):
        assert {k: a[k] for k in ("layer", "head", "site")} == {k: b[k] for k in ("layer", "head", "site")}
        for key in ("delta", "estimate", "normalized"):
            assert a[key] == pytest.approx(b[key], abs=1e-5), (key, a, b)
    assert whole.meta.m_clean_values == pytest.approx(cut.meta.m_clean_values, abs=1e-5)
    assert whole.meta.m_corrupt_values == pytest.approx(cut.meta.m_corrupt_values, abs=1e-5)


def test_route_attribution_past_its_token_budget_is_refused_with_the_estimate(tiny_llama, monkeypatch):
    monkeypatch.setattr(routes_module, "MAX_TOKENS", 20)
    same = [p for p in PAIRS if p.row <= 8]  # one length
    with pytest.raises(InputError) as e:
        ar.route_attribution(tiny_llama, prompts=same, layers=[0])
    said = str(e.value)
    assert e.value.field == "prompts" and "past the 20" in said and "give at most 2 prompts" in said


# ---------------------------------------------------------------- result files checked before allocation


@pytest.fixture(scope="module")
def patch_json(tiny_llama, tmp_path_factory):
    r = ar.patch(tiny_llama, PAIRS[:2], metric="logit-diff", exact=0)
    return json.loads(r.to_json())


@pytest.mark.parametrize(
    "break_it, said",
    [
        (lambda d: d["meta"].update(layers=10**6), "meta.layers is 1000000"),
        (lambda d: d["meta"].update(heads=-1), "meta.heads is -1"),
        (lambda d: d["rows"][0].update(layer=10**9), "rows[].layer is 1000000000"),
        (lambda d: d["rows"][0].update(position=10**9), "rows[].position"),
        (lambda d: d["meta"].update(layers="32"), "meta.layers is '32'"),
    ],
)
def test_report_add_refuses_sizes_no_result_has_before_allocating(patch_json, tmp_path, capsys, break_it, said):
    data = json.loads(json.dumps(patch_json))
    break_it(data)
    path = tmp_path / "patch.json"
    path.write_text(json.dumps(data))
    assert main(["report", "a b c", "--add", str(path), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --add") and said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r.html").exists()


def test_report_add_refuses_deep_nesting_and_huge_files(tmp_path, capsys, monkeypatch):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    assert main(["report", "a b c", "--add", str(deep), "--out", str(tmp_path / "r.html")]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    from attnroute.show import jsonout

    monkeypatch.setattr(jsonout, "MAX_JSON_BYTES", 10)
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"experiment": "patch", "pad": "x" * 100}))
    assert main(["report", "a b c", "--add", str(big), "--out", str(tmp_path / "r.html")]) == 2
    assert "a result file is at most 10" in capsys.readouterr().err


def test_a_circuit_forwards_edits_are_freed_when_it_returns_not_at_the_next_collection(tiny_llama, monkeypatch):
    """Each ReceiverEdit pointed back at its Forward: a cycle that kept every circuit chunk's edits — their
    [senders, copies, n·T·d] rows, 357 MiB a chunk on an IOI run — until the cyclic collector ran (IOI's curve
    peaked at 8.6 GiB, 3.5 with the cycle broken). With the collector off, nothing of a forward may outlive it."""
    import gc
    import weakref

    runs = importlib.import_module("attnroute.read.circuits.runs")
    stream = importlib.import_module("attnroute.read.circuits.stream")
    alive: list = []
    for cls in (runs.CircuitEdits, runs.PathEdits, stream.Forward):
        init = cls.__init__

        def spy(self, *a, _init=init, **k):
            _init(self, *a, **k)
            alive.append(weakref.ref(self))

        monkeypatch.setattr(cls, "__init__", spy)
    gc.collect()
    gc.disable()
    try:
        ar.circuit(tiny_llama, PAIRS[:3], exact=5, progress=False)
        assert alive and not [r for r in alive if r() is not None]
    finally:
        gc.enable()


def all_bytes(run) -> int:
    """Every storage reachable from a run but its SHARED attributes, at full size (the test's own count)."""
    found, stack, seen = {}, [v for k, v in vars(run).items() if k not in run.SHARED], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or isinstance(x, torch.nn.Module):
            continue
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            found[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        elif isinstance(x, dict | list | tuple):
            stack += list(x.values() if isinstance(x, dict) else x)
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            stack += list(vars(x).values())
    return sum(found.values())


@pytest.mark.parametrize("verb", ["patch", "circuit", "evaluate"])
def test_the_runs_kept_between_uses_fit_the_budget_as_they_are_held(tiny_llama, monkeypatch, verb):
    """A run is kept after use only while every kept run, counted as it is held then, fits KEEP_BYTES. The
    budget here holds the larger of the two runs (1.3–1.7 MB) but not both: more kept would be memory growing
    with the prompts (patch and circuit once counted a prediction that missed 2.4×; evaluate and path_patch
    counted nothing and kept every run)."""
    budget, kept, done = 1_450_000, [], pool_module.RunPool.done
    monkeypatch.setattr(pool_module, "KEEP_BYTES", budget)

    def checked(self, i):
        done(self, i)
        kept.append((i, len(self.kept), sum(all_bytes(r) for r in self.kept.values())))

    monkeypatch.setattr(pool_module.RunPool, "done", checked)
    if verb == "evaluate":
        ar.evaluate_circuit(tiny_llama, PAIRS, ["L0.H0>L1.H0.q"], progress=False)
    else:
        getattr(ar, verb)(tiny_llama, PAIRS, exact=5, progress=False, no_checkpoint=True)
    assert kept and all(held <= budget for _, _, held in kept), kept
    assert any(n <= i for i, n, _ in kept), kept  # a run let go: fewer kept than used so far


def test_the_direct_effect_recorder_keeps_one_position_not_its_tensor(tiny_llama):
    """FinalRecorder reads each norm's and projection's last position: a view of it (x[:, -1]) would keep the
    whole [n, T, d] tensor, 108 of a SmolLM2 IOI run's 314 MiB."""
    from attnroute.read.ground import metrics
    from attnroute.read.patching.runs import PairRun

    groups, _ = tokenize_pairs(tiny_llama.tokenizer, tiny_llama.kind, PAIRS, "logit-diff")
    g = max(groups, key=lambda g: len(g.rows))
    run = PairRun(tiny_llama, g, metrics.logit_diff, "denoising")
    rec, n = run.clean_final, len(g.rows)
    widest = max(t.shape[-1] for t in [*rec.inputs.values(), *rec.outputs.values()])
    assert g.length > 2 and pool_module.tensor_bytes(rec) <= 4 * n * widest * (len(rec.inputs) + len(rec.outputs) + 1)
