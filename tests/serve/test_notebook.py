"""docs/notebooks/attnroute.ipynb executed with nbclient on a real kernel: every result renders inline as
HTML without a script, prints one short line, and ar.serve starts, answers and stops from the notebook."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).parents[2] / "docs" / "notebooks" / "attnroute.ipynb"


def outputs(cell) -> tuple[str, str]:
    html = "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)
    text = "".join(o.get("data", {}).get("text/plain", "") for o in cell.outputs)
    text += "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")  # not stderr's warnings
    return html, text


def test_the_notebook_runs_and_every_display_is_inline_short_and_scriptless(tmp_path):
    copy = tmp_path / NOTEBOOK.name  # the repo's notebook is an input: it is never written
    shutil.copy(NOTEBOOK, copy)
    nb = nbformat.read(copy, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    shown = {c.source.splitlines()[-1]: outputs(c) for c in code}
    cards = {
        "table": "HeadTable(smollm2: 30 layers × 9 heads",
        "ko": "knockout",
        "sw": "swap",
        "nd": "needle",
        "pr": "patch",
    }
    for name, marker in cards.items():
        html, text = shown[name]
        assert marker in html and "<script" not in html.lower() and "<iframe" not in html, name
        assert len(text) < 400 and "\n" not in text.strip() and "array(" not in text, (name, text)
    assert "<td title=" in shown["table"][0]  # the role grid, its numbers on hover
    assert (
        shown["lm"][1].startswith("<LoadedModel smollm2: causal, 30 layers × 9 heads (3 kv)")
        and len(shown["lm"][1]) < 200
    )
    assert "layer" in shown['table.to_pandas()[["role", "entropy", "sink_mass", "induction"]].head()'][0]
    html, text = outputs(next(c for c in code if c.source.startswith("explorer = ar.serve")))
    assert "<iframe" in html and 'src="http://127.0.0.1:' in html and "token=" in html and "running" in text
    assert "{'status': 'ok', 'queue': 0}" in outputs(code[-2])[1]
    assert "stopped" in outputs(code[-1])[1] and "<iframe" not in outputs(code[-1])[0]  # closed: text, no frame
    stderr = "".join(o.get("text", "") for c in code for o in c.outputs if o.get("name") == "stderr")
    assert "TqdmWarning" not in stderr and "IProgress" not in stderr
    bars = [o for o in code[1].outputs if o.output_type == "display_data" and "· " in o["data"].get("text/html", "")]
    assert bars, "read_heads shows its progress in the cell"
    assert nbformat.read(NOTEBOOK, as_version=4).cells[1].outputs == []  # the input stayed as it was
    rendered_in_chromium(code, tmp_path)


def rendered_in_chromium(code, tmp_path) -> None:
    """Every HTML output of the executed notebook (the explorer's frame aside: its server is closed) in
    Chromium, each in a 980 px output box as Jupyter's: no card wider than its box (wide tables scroll
    inside), no script error, no request anywhere."""
    from tests.serve.test_browser import browser_page

    shown = [
        o["data"]["text/html"]
        for c in code
        for o in c.outputs
        if "text/html" in o.get("data", {}) and "<iframe" not in o["data"]["text/html"]
    ]
    boxes = "".join(f'<div class="output" style="width:980px;margin:8px">{h}</div>' for h in shown)
    page_file = tmp_path / "outputs.html"
    page_file.write_text(f"<!doctype html><meta charset='utf-8'><body>{boxes}<i id='end'></i></body>")
    with browser_page(page_file.as_uri()) as (page, events):
        page.wait_for_selector("#end", state="attached")
        wide = page.evaluate(
            """() => [...document.querySelectorAll('.output')].filter(o => o.scrollWidth > o.clientWidth + 1)
                 .map(o => o.innerText.slice(0, 80))"""
        )
        cards = page.evaluate("() => document.querySelectorAll('.output .attnroute').length")
        # a card clips what overflows it: nothing may (a wide table scrolls inside its own box)
        clipped = page.evaluate(
            """() => [...document.querySelectorAll('.attnroute')].filter(c => c.scrollWidth > c.clientWidth + 1)
                 .map(c => c.innerText.slice(0, 80))"""
        )
    assert wide == [] and clipped == [] and cards >= 5
    assert events["errors"] == [] and all(u.startswith("file:") for u in events["requests"])
