"""The explorer shown: its page, the grid data a text's read becomes, and the saved report of what is on
screen (with the cuts made as a card). serve/ runs the model and hands the numbers here; nothing here
runs a model.

    html = page_html(info)                                    # the single page of `attnroute serve`
    grid = text_grid(table, tokens, sink_keys, top)           # a text's grid, JSON-ready
    html = saved_page(view, opened, cuts, answer, tokens)     # the offline report of what is on screen
"""

from __future__ import annotations

from html import escape

import numpy as np

from .card import card, row
from .report import page, render, report_data
from .sections import insert


def page_html(info: dict) -> str:
    """The explorer page (explorer.html with components.js, explorer.js and explorer_speech.js inlined: nothing
    from a CDN); a speech model's server shows its clip section instead of the text and pair sections."""
    return page(
        "explorer.html", {"info": info}, {"/*__EXPLORER__*/": "explorer.js", "/*__SPEECH__*/": "explorer_speech.js"}
    )


def text_grid(table, tokens: list[str], sink_keys: list[int], top: list | None) -> dict:
    """The page's grid of one text: every [L, H] column rounded (NaN as 0), the roles, the tokens, the sink
    positions, the routing check, and the top next tokens of a causal LM."""
    cols = {c: np.nan_to_num(v, nan=0.0).round(5).tolist() for c, v in table.columns.items()}
    return {
        "tokens": tokens,
        "columns": cols,
        "roles": table.roles,
        "sink_keys": sink_keys,
        "routing_check": table.meta.routing_check,
        "stimulus": table.meta.stimulus,
        "top": top,
    }


def saved_page(view, opened: dict, cuts: list, answer: dict | None, tokens: list[str]) -> str:
    """The offline report of the text's view, opening on the heads and token shown, with the cuts made and
    their answer before and after as a card."""
    data = {**report_data(view, {"unavailable": "the explorer's saved page has no KV-cache card"}), "open": opened}
    # the explorer's words, not a flag its user never gave: it reads without ablation and measures cuts instead
    data["no_effects"] = "the explorer reads without ablation effects: its cuts (below) measure what a route does"
    return insert(render(data), [cuts_section(cuts, answer, tokens)] if cuts else [])


def _cut_said(c: dict, tokens: list[str]) -> str:
    if c["kind"] == "head":
        return f"cut head L{c['layer']}.H{c['head']}"
    q, k = c["query"], c["key"]
    return f"cut route {q} {tokens[q]!r} → {k} {tokens[k]!r} in L{c['layer']}.H{c['head']}"


def cuts_section(cuts: list, answer: dict, tokens: list[str]) -> str:
    """The saved page's card of the explorer's cuts: each cut, then the top 5 before and after (escaped)."""
    items = "".join(f"<li>{escape(_cut_said(c, tokens))}</li>" for c in cuts)
    m = answer["metric"]
    if answer["kind"] == "encoder":
        body = f"<p>{escape(m['name'])}: {m['after']:.6f} after the cuts</p>"
    else:

        def top(side):
            return "".join(
                f"<tr><td>{escape(repr(t['token']))}</td><td class='num'>{t['p']:.6f}</td></tr>"
                for t in answer[side]["top"]
            )

        body = (
            f"<p>{escape(m['name'])}: {m['before']:.6f} before, {m['after']:.6f} after</p><div class='row'>"
            f"<div><h3>before</h3><table class='kv'>{top('before')}</table></div>"
            f"<div><h3>after</h3><table class='kv'>{top('after')}</table></div></div>"
        )
    return row(card("Cuts made in the explorer", body=f"<ol>{items}</ol>{body}", kind="", element_id="explorer-cuts"))


__all__ = ["cuts_section", "page_html", "saved_page", "text_grid"]
