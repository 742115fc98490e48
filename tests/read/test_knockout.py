"""Route knockout on SmolLM2: cutting every edge into a key equals removing the key, cutting nothing
changes nothing bit for bit, and the CLI's JSON and figure."""

import json

import pytest
import torch

from attnroute.cli import main
from attnroute.engine import KnockoutEdges
from attnroute.read.adapter import routed
from attnroute.read.experiments.knockout import knockout
from attnroute.read.ground.positions import PositionError, resolve_positions
from attnroute.read.stimuli import encode_text

PROMPT = "The Eiffel Tower is located in the city of"


def logits(lm, ids, mask=None, interventions=()):
    with torch.no_grad(), routed(lm, interventions=interventions, impl="eager"):
        return lm.model(input_ids=ids, attention_mask=torch.ones_like(ids) if mask is None else mask).logits[0]


def test_knocking_out_every_edge_into_a_key_equals_removing_it(smollm2):
    ids, _ = encode_text(smollm2.tokenizer, PROMPT, None)
    T, k = ids.shape[1], 4  # "ĠTower"
    cut = [KnockoutEdges(range(T), [k], layer=layer) for layer in range(smollm2.n_layers)]
    mask = torch.ones_like(ids)
    mask[0, k] = 0  # the key is padding: no query may see it, in any layer or head
    a, b = logits(smollm2, ids, interventions=cut), logits(smollm2, ids, mask=mask)
    rows = [t for t in range(T) if t != k]  # the removed position's own row differs (it saw itself before)
    assert (a[rows] - b[rows]).abs().max() < 1e-4


def test_knocking_out_nothing_changes_nothing_bit_for_bit(smollm2):
    ids, _ = encode_text(smollm2.tokenizer, PROMPT, None)
    nothing = [KnockoutEdges([], [4], layer=layer) for layer in range(smollm2.n_layers)]
    assert torch.equal(logits(smollm2, ids, interventions=nothing), logits(smollm2, ids))


def test_positions_from_words_and_indices(smollm2):
    ids, _ = encode_text(smollm2.tokenizer, PROMPT, None)
    tok = smollm2.tokenizer
    assert resolve_positions(tok, PROMPT, ids, "Eiffel", "target") == ([2, 3], 1)  # "ĠE", "iffel" overlap the word
    assert resolve_positions(tok, PROMPT, ids, "of", "source") == ([10], 1)
    assert resolve_positions(tok, PROMPT, ids, "3,4", "source") == ([3, 4], 0)
    with pytest.raises(PositionError, match="'Louvre' is not a word of the text") as e:
        resolve_positions(tok, PROMPT, ids, "Louvre", "target")
    assert e.value.field == "target"
    found, matches = resolve_positions(tok, TWICE, encode_text(tok, TWICE, None)[0], "cat", "source")
    assert matches == 2 and len(found) == 2  # every occurrence is used, and the count is said


TWICE = "The cat saw the dog, and the cat ran"


def test_the_subject_route_matters_more_than_its_control_somewhere(smollm2):
    """Geva et al.'s finding in miniature: the last token's edges to the subject carry the answer in
    some window of layers; the same number of edges elsewhere does not."""
    r = knockout(smollm2, PROMPT, source="of", target="Tower", window=5).to_dict()
    assert r["target"]["token"] == " Paris" and len(r["windows"]) == smollm2.n_layers - 5 + 1
    worst_route = min(w["delta_p_route"] for w in r["windows"])
    assert worst_route < -0.05 and r["control"]["keys"] != r["route"]["keys"]
    assert all(w["delta_prompt_loss_route"] == 0 for w in r["windows"])  # only the last row was cut


def test_windows_run_as_copies_in_one_forward_equal_each_window_run_alone(smollm2):
    """knockout runs its windows as copies of the text in batched forwards (a short text's forward costs reading
    the weights); each window equals its cut run alone, its p and its prompt loss, for a route out of a middle
    query (every later row moves) and out of the last one (the loss must not move at all)."""
    from attnroute.read.experiments.knockout import _copies

    ids, _ = encode_text(smollm2.tokenizer, PROMPT, None)
    T = ids.shape[1]
    assert _copies(T, smollm2.tokenizer.vocab_size, 52) > 2  # this text does share forwards
    for source in ("city", "of"):
        k = knockout(smollm2, PROMPT, source=source, target="Eiffel", window=2)
        for i in (0, 13, len(k.windows) - 1):
            a, b = k.windows[i]
            for keys, p, loss in ((k.keys, k.p_route, k.loss_route), (k.control_keys, k.p_control, k.loss_control)):
                cut = [KnockoutEdges(k.queries, keys, layer=layer) for layer in range(a, b + 1)]
                alone = logits(smollm2, ids, interventions=cut).float()
                assert abs(float(torch.softmax(alone[-1], -1)[k.target_id]) - p[i]) <= 1e-5
                want = float(torch.nn.functional.cross_entropy(alone[:-1], ids[0, 1:]))
                assert abs(want - loss[i]) <= 1e-5
        moved = [abs(x - k.loss_clean) for x in k.loss_route]
        assert (max(moved) > 1e-4) if source == "city" else (max(moved) == 0.0)


def test_cli_writes_json_and_figure(smollm2, tmp_path, capsys):
    js, png = tmp_path / "k.json", tmp_path / "k.png"
    code = main(
        [
            "knockout",
            PROMPT,
            "--from",
            "of",
            "--to",
            "Tower",
            "--window",
            "25",
            "--heads",
            "0,1,2",
            "--json",
            str(js),
            "--plot",
            str(png),
        ]
    )
    assert code == 0, capsys.readouterr().err
    data = json.loads(js.read_text())
    assert data["heads"] == [0, 1, 2] and len(data["windows"]) == 6 and png.stat().st_size > 10_000


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--from", "Tower", "--to", "of"], "no 'Tower' position comes after a 'of' position"),
        (["--from", "of", "--to", "Tower", "--window", "31"], "window must be between 1 and the model's 30 layers"),
        (["--from", "of", "--to", "Tower", "--heads", "9"], "head 9 does not exist"),
    ],
)
def test_cli_bad_routes_are_one_line(smollm2, capsys, argv, message):
    code = main(["knockout", PROMPT, *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()[-1:]) == 1 and "Traceback" not in err


def test_the_control_never_cuts_the_querys_local_context_whatever_the_seed(smollm2):
    """The control's keys stay LOCAL tokens or more before the query (the local context " in the city" moves
    p(" Paris") by itself), over 50 seeds: the draw itself, as knockout() makes it (no forward needed)."""
    from attnroute.read.experiments.knockout import LOCAL, _route
    from attnroute.settings import KnockoutSettings

    ids, _ = encode_text(smollm2.tokenizer, PROMPT, None)
    drawn = set()
    for seed in range(50):
        s = KnockoutSettings.of(
            None, smollm2, {"source": "of", "target": "Tower", "window": 5, "seed": seed}, text=PROMPT
        )
        (q,), keys, control, _ = _route(smollm2, s, ids)
        assert all(q - k > LOCAL for k in control) and not set(control) & {0, q, *keys}, (seed, control)
        drawn.add(tuple(control))
    assert len(drawn) > 1  # the seed does draw: a fixed control would pass the line above trivially


@pytest.mark.parametrize("seed", range(2))
def test_the_verdict_reads_magnitude_and_says_when_the_control_moves_p(smollm2, seed):
    """The verdict names the window with the largest |Δp|, either sign, and says when the control is not
    neutral; the control run is the one _route drew for the seed."""
    from attnroute.read.experiments.knockout import LOCAL

    r = knockout(smollm2, PROMPT, source="of", target="Tower", window=5, seed=seed).to_dict()
    (q,) = r["route"]["queries"]
    assert all(q - k > LOCAL for k in r["control"]["keys"]), r["control"]["keys"]
    most = max(r["windows"], key=lambda w: abs(w["delta_p_route"]))
    said = next(line for line in r["verdict"]["lines"] if "moves it most" in line)
    assert f"{most['delta_p_route']:+.3f}" in said and f"{most['layers'][0]}–{most['layers'][1]}" in said
    moves = [abs(w["delta_p_control"]) for w in r["windows"]]
    assert r["control"]["max_abs_delta_p"] == pytest.approx(max(moves))
    note = any(line.startswith("note: the control route is not neutral") for line in r["verdict"]["lines"])
    assert note == (not r["control"]["neutral"])


def test_a_control_that_moves_p_is_said_beside_the_result():
    from attnroute.read.experiments.knockout import _control_said

    rows = [
        {"layers": [0, 4], "delta_p_route": -0.20, "delta_p_control": 0.01},
        {"layers": [1, 5], "delta_p_route": 0.05, "delta_p_control": 0.15},
    ]
    said = _control_said(rows)
    assert said["neutral"] is False and said["max_abs_delta_p"] == pytest.approx(0.15)
    assert "+0.150 (layers 1–5), 0.7× the route's largest move" in said["note"]
    rows[1]["delta_p_control"] = 0.015  # below 0.02: neutral whatever the route did
    assert _control_said(rows) == {"max_abs_delta_p": 0.015, "neutral": True, "note": ""}
