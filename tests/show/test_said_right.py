"""What the tables and figures say: no `nan` where a mode was not run (an em dash), each role's score with
its unit, and a routes figure of bounded width over a long text with its strongest arcs labelled."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib.image

from attnroute.cli import main
from attnroute.show.heads import UNITS
from attnroute.show.routes import MAX_INCHES, routes_png


def test_heads_tables_say_a_dash_for_modes_not_run_and_give_units(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")  # rich wraps cells to the terminal's width
    text = "The cat sat on the mat. The cat sat on the mat. The dog ran."
    assert main(["heads", "--model", "minilm", "--text", text, "--modes", "zero"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out.lower() and "—" in out  # Δ mean and Δ uniform were not run
    assert UNITS["entropy_norm"] in out and UNITS["prev_token"] in out


def long_result(T: int = 3000) -> SimpleNamespace:
    """What the routes figure reads of a RoutesResult (its meta read like its JSON), over a long text."""
    tokens = [f"w{i}" for i in range(T)]
    routes = [
        {"layer": i % 7, "head": i % 3, "query": T - 1 - i, "key": (i * 97) % (T - 40), "estimate": (-1) ** i / (i + 1)}
        for i in range(20)
    ]
    return SimpleNamespace(meta={"tokens": tokens, "metric": "logit-diff", "m": 1.0}, routes=routes)


def test_a_routes_figure_over_a_long_text_is_at_most_its_width(tmp_path):
    path = tmp_path / "routes.png"
    routes_png(long_result(), path)
    height, width = matplotlib.image.imread(path).shape[:2]
    assert width <= MAX_INCHES * 110 + 1 and height < 800, (width, height)


def test_the_strongest_routes_are_labelled_with_their_heads(tmp_path, monkeypatch):
    import matplotlib.axes

    said = []
    original = matplotlib.axes.Axes.text
    monkeypatch.setattr(
        matplotlib.axes.Axes, "text", lambda self, x, y, s, **k: said.append(s) or original(self, x, y, s, **k)
    )
    r = long_result()
    routes_png(r, tmp_path / "routes.png")
    assert said[:8] == [f"L{x['layer']}.H{x['head']}" for x in r.routes[:8]]


def test_a_token_is_never_wrapped_inside_a_narrow_table():
    """' Then' wrapped at its space left a lone quote in an 80-column table: its spaces are drawn as ␣."""
    from rich.console import Console

    from attnroute.show.routes import routes_table

    route = {"layer": 12, "head": 3, "query": 14, "key": 3, "query_token": " Then", "key_token": " Mary"}
    route |= {"weight": 0.123, "norm_weight": 0.45, "estimate": 0.123, "exact": 0.111}
    result = SimpleNamespace(
        agreement={"estimate_vs_exact": {"spearman": None}}, meta={"metric": "logit-diff", "m": 1.0}, routes=[route]
    )
    console = Console(width=60, record=True)
    console.print(routes_table(result))
    text = console.export_text()
    assert "'␣Then'" in text and "'␣Mary'" in text
