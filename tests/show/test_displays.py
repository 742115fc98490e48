"""Notebook displays: one-line text reprs and scriptless, escaped HTML cards (the notebook test runs them in
a kernel; here the escaping and the shapes are pinned on a tiny model)."""

from __future__ import annotations

import attnroute as ar


def test_a_result_card_escapes_the_users_text_and_its_repr_is_one_line(tmp_path):
    from tests.read.zoo import build

    lm = ar.load_model(str(build("llama", tmp_path)))
    evil = "<img src=x onerror=alert(1)>"
    text = "alpha <i>beta</i> gamma one two three four five six delta alpha"
    ko = ar.knockout(lm, text, source="delta", target="<i>beta</i>", window=2)
    html, text = ko._repr_html_(), repr(ko)
    assert "&#x27;&lt;i&gt;beta&lt;/i&gt;&#x27; resolved to positions" in html and "<i>beta" not in html
    assert "<script" not in html.lower() and "<b>knockout · " in html and "<table" in html
    assert text.startswith("<knockout result of ") and "\n" not in text and len(text) < 300
    table = ar.read_heads(lm, f"alpha {evil} beta", ablation=False, verify=False)
    card = table._repr_html_()
    assert card.count("<td title=") == 2 * 4 and "<script" not in card.lower() and "<img" not in card
    assert repr(table).startswith("<HeadTable(") and "array" not in repr(table)
    df = table.to_pandas()
    assert list(df.index.names) == ["layer", "head"] and len(df) == 8 and "role" in df.columns
    assert repr(lm).startswith("<LoadedModel ") and "Linear" not in repr(lm)


def test_masks_draw_themselves():
    html = ar.causal()._repr_html_()
    assert "■ ⬚ ⬚ ⬚ ⬚ ⬚ ⬚ ⬚" in html and "<script" not in html
    assert "own length" in (ar.causal() & ar.padding([5], Tk=9))._repr_html_()


def test_previews_show_the_rows_that_matter_and_tables_scroll_inside_their_card():
    from attnroute.engine.display import result_html

    rows = [{"layer": i, "exact": None, "estimate": 0.01 * i} for i in range(20)]
    rows[17]["exact"], rows[3]["exact"] = -0.9, 0.4  # measured rows, not first by layer
    html = result_html({"experiment": "patch", "model": "m", "edges": rows}, "edges")
    first = html.index("<td", html.index("<table"))
    assert html.index("-0.9", first) < html.index("0.4", first) < html.index("0.19", first)
    assert "largest |exact| first (measured rows first)" in html
    assert "overflow-x:auto" in html and "max-width:980px" in html


def test_a_closed_explorer_renders_as_text():
    import threading

    from attnroute.serve.server import Handle

    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    h = Handle(server=None, thread=t, url="http://127.0.0.1:1/?token=x", token="x")
    assert "<iframe" not in h._repr_html_() and "stopped" in h._repr_html_()


def test_a_knockout_with_your_metric_speaks_in_it_first(tmp_path):
    from tests.read.zoo import build

    lm = ar.load_model(str(build("llama", tmp_path)))
    text = "alpha beta gamma one two three four five six delta alpha"
    ko = ar.knockout(
        lm, text, source="delta", target="beta", window=2, metric="logit-diff", answer=" alpha", wrong=" beta"
    )
    d = ko.to_dict()
    assert d["verdict"]["lines"][0].startswith("logit-diff on the clean prompt")
    assert "logit-diff: cutting the route" in d["verdict"]["lines"][1]
    assert next(iter(d["summary"])) == "logit-diff clean"
    assert "logit-diff on the clean prompt" in ko._repr_html_()
