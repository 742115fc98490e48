"""The routing report: self-contained, escaped, interactive in a real browser (headless Chromium)."""

import io
import json
import re

import numpy as np
import pytest

from attnroute.cost import kv_card
from attnroute.read.capture import routing_view
from attnroute.show import report as report_mod
from attnroute.show.figures import write_pngs


def report_page(view):
    """The page as `attnroute report` builds it: the KV card from cost/, rendered by show/."""
    return report_mod.build(view, kv=kv_card(view.config, view.table.attention, view.context, len(view.tokens)))


INJECTION = 'Look: <script>alert(1)</script> and "><img src=x onerror=alert(1)> end.'


@pytest.fixture(scope="module")
def smollm2_report(smollm2):
    return report_page(routing_view(smollm2, INJECTION, ablation=False))


@pytest.fixture(scope="module")
def minilm_report(minilm):
    return report_page(routing_view(minilm, "A short sentence, with a comma. And another one.", ablation=True))


def test_page_is_self_contained_and_escaped(smollm2_report):
    html = smollm2_report.html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # no CDN, no network
    assert "<script>alert(1)</script>" not in html and "<img src=x" not in html
    assert html.count("<script") == 2  # the data block and the page's own script, nothing injected
    assert len(html) < report_mod.WEIGHT_BUDGET * 4 / 3 + 400_000


def test_weights_are_bounded_with_top_k_and_say_what_was_dropped():
    w = [np.random.default_rng(0).dirichlet(np.ones(50), size=(4, 50)) for _ in range(3)]  # L=3 × [H, T, T]
    full = report_mod.pack_weights(w)
    assert full["format"] == "full" and full["dropped_mean"] == 0
    small = report_mod.pack_weights(w, budget=3 * 4 * 50 * 3 * 5)
    assert small["format"] == "topk" and small["k"] == 5 and 0 < small["dropped_mean"] < small["dropped_max"] < 1


def test_pngs_and_json_data(minilm_report, tmp_path):
    paths = write_pngs(minilm_report.data, tmp_path)
    assert {p.name for p in paths} == {"head_roles.png", "entropy_hist.png", "weight_vs_effect.png"}
    assert all(p.stat().st_size > 5000 for p in paths)
    assert minilm_report.data["has_effects"] and minilm_report.data["kv"]["bytes_per_token_fp32"] == 2 * 6 * 12 * 32 * 4
    assert "srcdoc" in minilm_report._repr_html_()


@pytest.mark.parametrize("which", ["smollm2_report", "minilm_report"])
def test_page_in_headless_chromium(which, request, tmp_path, open_page):
    rep = request.getfixturevalue(which)
    path = rep.save(tmp_path / "report.html")
    with open_page(path, ready="rect.cell[data-layer='0'][data-head='1']") as (page, events):
        title = page.text_content("#detail-title")
        heat_before = page.evaluate("document.getElementById('heat').toDataURL()")
        page.click("rect.cell[data-layer='0'][data-head='1']")
        assert page.text_content("#detail-title") != title and "L0.H1" in page.text_content("#detail-title")
        assert page.evaluate("document.getElementById('heat').toDataURL()") != heat_before
        page.select_option("#metric", "entropy")
        labels = page.eval_on_selector_all("#links text", "els => els.map(e => e.textContent).join('|')")
        shot = page.screenshot(full_page=True)
    assert events["errors"] == [] and events["dialogs"] == []
    if which == "smollm2_report":
        assert "<" in labels and "script" in labels  # the injected markup is shown as text
    from PIL import Image  # matplotlib depends on pillow

    img = np.asarray(Image.open(io.BytesIO(shot)).convert("L"), dtype=float)
    assert img.std() > 10  # not blank


def test_cli_report_writes_page_pngs_and_json(tmp_path, capsys):
    from attnroute.cli import main

    out = tmp_path / "r.html"
    code = main(
        [
            "report",
            "Hello there, hello again.",
            "--model",
            "minilm",
            "--out",
            str(out),
            "--png-dir",
            str(tmp_path / "png"),
            "--json",
            str(tmp_path / "r.json"),
            "--no-ablation",
        ]
    )
    assert code == 0 and out.exists() and (tmp_path / "png" / "head_roles.png").exists()
    assert "wrote" in capsys.readouterr().err
    assert main(["report", "   ", "--model", "minilm"]) == 2


def test_encoder_decoder_report_groups_rows_and_reads_each_streams_tokens(tmp_path, open_page):
    """A tiny random T5: rows labelled E/D/X by attention kind, a cross-attention head shows decoder
    queries against encoder keys, no KV card numbers (said why), no script error."""
    from attnroute.models import load
    from tests.read.zoo import build

    lm = load(str(build("t5", tmp_path)))
    rep = report_page(routing_view(lm, "Alice gave Bob the book.", ablation=False))
    assert rep.data["attention"] == lm.attention_kinds and rep.data["decoder_tokens"] != rep.data["tokens"]
    assert "unavailable" in rep.data["kv"]
    path = rep.save(tmp_path / "t5.html")
    cross = lm.attention_kinds.index("cross")
    with open_page(path, ready=f"rect.cell[data-layer='{cross}'][data-head='1']") as (page, events):
        page.click(f"rect.cell[data-layer='{cross}'][data-head='1']")
        assert "X0.H1" in page.text_content("#detail-title")
        labels = page.eval_on_selector_all("#links text", "els => els.map(e => e.textContent)")
        grid = page.eval_on_selector_all("#grid text", "els => els.map(e => e.textContent)")
    assert {"E0", "E1", "D0", "D1", "X0", "X1"} <= set(grid)
    dec, enc = rep.data["decoder_tokens"], rep.data["tokens"]
    assert labels[2] == dec[0][:14] and labels[3] == enc[0][:14]  # left column: queries; right: keys
    assert events["errors"] == []


def test_corpus_card_shows_error_bars_and_significance(tmp_path, open_page, capsys):
    """`attnroute report --corpus`: an error-bar card (mean ± 95 % over documents per head) and the
    importance table with Holm-adjusted p, in a real browser, no script error."""
    import json

    from attnroute.cli import main
    from tests.read.test_corpus import CORPUS
    from tests.read.zoo import build

    model = build("llama", tmp_path)
    out, js = tmp_path / "r.html", tmp_path / "r.json"
    code = main(
        [
            "report",
            "--model",
            str(model),
            "--corpus",
            str(CORPUS),
            "--limit",
            "5",
            "--out",
            str(out),
            "--json",
            str(js),
        ]
    )
    assert code == 0, capsys.readouterr().err
    card = json.loads(js.read_text())["corpus"]
    assert card["n_documents"] == 5 and len(card["importance_rows"]) > 0
    assert all(v is not None for row in card["ci"]["entropy"] for v in row)
    with open_page(out, ready="circle.corpus-dot") as (page, events):
        assert page.is_visible("#corpus-row")
        assert page.eval_on_selector_all("circle.corpus-dot", "els => els.length") == 2 * 4
        assert page.eval_on_selector_all("line.errbar", "els => els.length") == 2 * 4
        rows = page.eval_on_selector_all("#corpus-importance tr", "els => els.length")
        note = page.text_content("#corpus-importance-note")
        page.select_option("#corpus-metric", "sink_mass")
        page.click("circle.corpus-dot >> nth=5")
        title = page.text_content("#detail-title")
    assert rows == len(card["importance_rows"]) + 1 and "Holm" in note and "L1.H1" in title
    assert events["errors"] == []


def test_report_adds_knockout_swap_and_needle_sections(tmp_path, open_page, capsys):
    """`report --add` puts each finding in the page as a card (figure, verdict, summary), in a browser;
    a file that is not such a result is refused before the model runs."""
    from attnroute.cli import main
    from tests.read.zoo import build

    model = str(build("llama", tmp_path))
    prompt = "Alice gave Bob the book because she"
    ko, sw, nd = tmp_path / "ko.json", tmp_path / "sw.json", tmp_path / "nd.json"
    assert (
        main(
            ["knockout", prompt, "--from", "she", "--to", "Alice", "--window", "1", "--model", model, "--json", str(ko)]
        )
        == 0
    )
    assert main(["swap", prompt, "Alice gave Bob the pen because she", "--model", model, "--json", str(sw)]) == 0
    assert main(["needle", "--lengths", "64,100", "--model", model, "--json", str(nd)]) == 0
    out = tmp_path / "r.html"
    code = main(
        [
            "report",
            "A short text.",
            "--model",
            model,
            "--no-ablation",
            "--out",
            str(out),
            "--add",
            str(ko),
            "--add",
            str(sw),
            "--add",
            str(nd),
        ]
    )
    assert code == 0, capsys.readouterr().err
    with open_page(out, ready="div.finding[data-experiment='needle']") as (page, events):
        kinds = page.eval_on_selector_all("div.finding", "els => els.map(e => e.dataset.experiment)")
        imgs = page.eval_on_selector_all("div.finding img", "els => els.map(e => e.naturalWidth)")
    assert kinds == ["knockout", "swap", "needle"] and all(w > 300 for w in imgs) and events["errors"] == []
    bad = tmp_path / "bad.json"
    bad.write_text('{"experiment": "knockout"}')
    capsys.readouterr()
    code = main(["report", "--model", model, "--out", str(tmp_path / "x.html"), "--add", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "not a whole knockout result: the field verdict is missing" in err
    assert not (tmp_path / "x.html").exists()
    broken = json.loads(ko.read_text())
    broken["windows"][1]["delta_p_route"] = "0.3"  # a number written as text
    bad.write_text(json.dumps(broken))
    assert main(["report", "--model", model, "--out", str(tmp_path / "x.html"), "--add", str(bad)]) == 2
    assert "the field windows[1].delta_p_route is str, expected float" in capsys.readouterr().err
