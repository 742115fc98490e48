"""The routing report: self-contained, escaped, interactive in a real browser (headless Chromium)."""

import io
import json
import re

import numpy as np
import pytest

from attnroute.cost import kv_card
from attnroute.read.report import routing_view
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
    for name in ("components.js", "report.js", "explorer.js", "page.css"):  # inlined: none may close its element
        text = report_mod.asset(name).lower()
        assert "<script" not in text and "</script" not in text and "<!--" not in text and "</style" not in text
    assert len(html) < report_mod.WEIGHT_BUDGET * 4 / 3 + 400_000


def test_every_key_is_kept_at_512_tokens_and_past_the_budget_the_drop_is_said():
    from attnroute.show import weights as codec

    g = np.random.default_rng(0)
    T = 512
    w = g.dirichlet(np.full(T, 0.05), size=(2, T)) * np.tri(T)  # a diffuse causal row has most keys under 1/510
    w /= w.sum(-1, keepdims=True)
    layers = [w.astype(np.float32)] * 3
    packed = report_mod.pack_weights(layers)
    assert packed["format"] == "log8" and packed["triangle"] == [True] * 3
    assert packed["dropped_max"] <= T * codec.FLOOR  # every key from 1e-6 up is kept
    # a 512-token SmolLM2 page (30 layers × 9 heads, causal triangles) fits the budget: every key kept
    assert 30 * 9 * T * (T + 1) // 2 <= report_mod.WEIGHT_BUDGET
    # the codes round-trip within half a step of the log scale (±2.8 %)
    codes = codec.encode(w)
    back, keep = codec.decode(codes), codes > 0
    assert np.abs(back[keep] / w[keep] - 1).max() <= 0.028 and np.all(w[~keep] < codec.FLOOR)
    assert np.all(keep[w >= codec.FLOOR])
    small = report_mod.pack_weights(layers, budget=3 * 2 * T * 3 * 5)
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
    T = len(rep.data["tokens"])
    with open_page(path, ready="body[data-ready='1']") as (page, events):
        title = page.text_content("#detail-title")
        heat = "document.querySelector('canvas.heat').toDataURL()"
        heat_before = page.evaluate(heat)
        page.click("#grid rect.cell[data-layer='0'][data-head='1']")
        assert page.text_content("#detail-title") != title and "L0.H1" in page.text_content("#detail-title")
        assert page.evaluate(heat) != heat_before
        labels = page.eval_on_selector_all("svg.links text", "els => els.map(e => e.textContent).join('|')")
        assert page.locator("svg.links text").count() == 2 + 2 * T  # every token, the card scrolls
        sink_links = page.locator("line.route[data-key='0']").count()
        page.check("#hide-sink")  # the sink's links go, the rest renormalized
        assert sink_links > 0 and page.locator("line.route[data-key='0']").count() == 0
        page.uncheck("#hide-sink")
        plain = page.evaluate(heat)
        page.check("#norm-weighted")  # the value-norm-weighted map beside the raw one
        assert page.evaluate(heat) == plain and page.locator("canvas.heat-norm").count() == 1
        assert page.evaluate("document.querySelector('canvas.heat-norm').toDataURL()") != plain
        page.click("#grid rect.cell[data-layer='1'][data-head='2']", modifiers=["Shift"])  # two heads side by side
        assert page.locator("#panels .panel").count() == 2 and "beside" in page.text_content("#detail-title")
        page.fill("#layer-from", "1")
        page.fill("#layer-to", "2")
        page.dispatch_event("#layer-to", "change")
        assert page.locator("#grid rect.cell").count() == 2 * rep.data["heads"]
        page.click("#token-text .tok[data-index='2']")  # every head's routes out of a token
        assert "Token 2" in page.text_content("#token-title")
        assert page.locator("#token-grid rect.cell").count() == 2 * rep.data["heads"]
        page.select_option("#token-dir", "into")
        assert "routes in" in page.text_content("#token-title")
        page.select_option("#metric", "entropy")
        cards = {c: page.is_visible(c) for c in ("#induction-card", "#kv-card", "#corpus-row")}
        note = page.text_content("#weights-note")
        shot = page.screenshot(full_page=True)
    assert events["errors"] == [] and events["dialogs"] == []
    assert "every key of every row kept" in note
    causal = which == "smollm2_report"
    assert cards == {"#induction-card": causal, "#kv-card": causal, "#corpus-row": False}  # cards that apply
    if causal:
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
    with open_page(path, ready="body[data-ready='1']") as (page, events):
        page.click(f"#grid rect.cell[data-layer='{cross}'][data-head='1']")
        assert "X0.H1" in page.text_content("#detail-title")
        labels = page.eval_on_selector_all("svg.links text", "els => els.map(e => e.textContent)")
        grid = page.eval_on_selector_all("#grid text", "els => els.map(e => e.textContent)")
    assert {"E0", "E1", "D0", "D1", "X0", "X1"} <= set(grid)
    dec, enc = rep.data["decoder_tokens"], rep.data["tokens"]
    assert labels[2] == f"0 {dec[0]}"[:16] and labels[2 + len(dec)] == f"{enc[0]} 0"[:16]  # queries, then keys
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
    with open_page(out, ready="body[data-ready='1']") as (page, events):
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
    bad.write_text('{"experiment": "knockout", "attnroute": {"result": "knockout", "format": 1}}')
    capsys.readouterr()
    code = main(["report", "--model", model, "--out", str(tmp_path / "x.html"), "--add", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "not a whole knockout result: the field verdict is missing" in err
    assert not (tmp_path / "x.html").exists()
    broken = json.loads(ko.read_text())
    broken["rows"][1]["delta_p_route"] = "0.3"  # a number written as text
    bad.write_text(json.dumps(broken))
    assert main(["report", "--model", model, "--out", str(tmp_path / "x.html"), "--add", str(bad)]) == 2
    assert "the field rows[1].delta_p_route is str, expected float" in capsys.readouterr().err
