"""The audio report: one self-contained HTML page of a speech model's read of a clip — the log-mel
spectrogram with the words where the consensus alignment puts them, every cross-attention head's map
(transcript tokens × time) with the alignment heads marked (the model's reference list, and attnroute's
own top of the ranking), one head at a time large, and the heads table of all three modes.

Every figure is a PNG embedded as a data: URI; the page loads nothing. Every piece of text that came
from the user or the model (the clip's name, the transcript, tokens) is escaped.
"""

from __future__ import annotations

import base64
import html
import json

import numpy as np

from ..audio import FRAME_SECONDS
from .plotting import png, pyplot

COLUMNS = ("mode", "stream_layer", "entropy", "sink_mass", "alignment", "monotonicity", "ablation_delta", "role")


def _uri(fig) -> str:
    plt = pyplot()
    data = png(lambda f: fig.savefig(f, format="png", dpi=90, bbox_inches="tight"))
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def spectrogram(mel: np.ndarray, words: list[dict]) -> str:
    """The clip's log-mel spectrogram, time in seconds, word starts from the consensus alignment."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 2.6))
    ax.imshow(mel, origin="lower", aspect="auto", cmap="magma", extent=(0, mel.shape[1] * 0.01, 0, mel.shape[0]))
    for w in words:
        ax.axvline(w["start"], color="white", lw=0.8, alpha=0.7)
        ax.text(w["start"] + 0.01, 74, w["word"], color="white", fontsize=8, va="top")
    ax.set_xlabel("seconds")
    ax.set_ylabel("mel bin")
    ax.set_title("log-mel spectrogram (Whisper's features); lines: word starts by the consensus alignment")
    return _uri(fig)


def head_map(view, l: int, h: int, title: str, size=(10, 2.8)) -> str:
    """One cross-attention head: rows predict the transcript's tokens, columns are the clip's frames."""
    plt = pyplot()
    w = view.cross[l, h]  # (N + 1, F)
    fig, ax = plt.subplots(figsize=size)
    ax.imshow(
        w, aspect="auto", cmap="viridis", interpolation="nearest", extent=(0, w.shape[1] * FRAME_SECONDS, len(w), 0)
    )
    labels = [*view.tokens, "<|endoftext|>"]
    if size[0] >= 6:
        ax.set_yticks(np.arange(len(labels)) + 0.5, labels, fontsize=7)
        ax.set_xlabel("seconds")
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_title(title, fontsize=8 if size[0] < 6 else 10)
    return _uri(fig)


def _cell(v) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if isinstance(v, float) else html.escape(str(v))


def heads_rows(table) -> str:
    rows = []
    for r in table.rows():
        cells = "".join(f"<td>{_cell(r.get(c))}</td>" for c in COLUMNS)
        rows.append(f"<tr><td>L{r['layer']}.H{r['head']}</td>{cells}</tr>")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ("head", *COLUMNS))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def grid(view, found: dict) -> tuple[str, dict]:
    """The small maps of every cross head (reference heads outlined red, attnroute's top marked ★) and
    the large map of each, keyed "l.h" (what the page's selector shows)."""
    ref = {tuple(x) for x in found.get("reference", [])}
    top = {tuple(x) for x in found["ranking"][: max(1, len(ref))]}
    cells, large = [], {}
    Lc, H = view.cross.shape[:2]
    for l in range(Lc):
        for h in range(H):
            rank = found["ranking"].index([l, h]) + 1
            mark = ("★ " if (l, h) in top else "") + ("reference" if (l, h) in ref else "")
            title = f"C{l}.H{h} · rank {rank} {mark}"
            small = head_map(view, l, h, title, size=(2.6, 1.4))
            cls = "ref" if (l, h) in ref else ""
            cells.append(
                f'<figure class="{cls}" data-head="{l}.{h}"><img alt="{html.escape(title)}" src="{small}"></figure>'
            )
            large[f"{l}.{h}"] = head_map(view, l, h, f"cross layer {l}, head {h} (rank {rank}) {mark}")
    return f'<div class="grid" style="grid-template-columns: repeat({H}, 1fr)">{"".join(cells)}</div>', large


STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px; color: #222 }
.grid { display: grid; gap: 4px } .grid figure { margin: 0; border: 2px solid transparent; cursor: pointer }
.grid figure.ref { border-color: #d33 } .grid img, #large { width: 100% }
table { border-collapse: collapse; font-size: 12px } td, th { padding: 2px 6px; border-bottom: 1px solid #ddd }
.note { color: #555 }
"""

SCRIPT = """
const large = JSON.parse(document.getElementById('maps').textContent);
function show(key) { document.getElementById('large').src = large[key]; document.getElementById('pick').value = key; }
document.querySelectorAll('.grid figure').forEach(f => f.addEventListener('click', () => show(f.dataset.head)));
document.getElementById('pick').addEventListener('change', e => show(e.target.value));
"""


def build(view) -> str:
    """The page's HTML."""
    meta = view.table.meta
    found = meta.alignment
    small, large = grid(view, found)
    first = "{}.{}".format(*found["ranking"][0])
    options = "".join(
        f'<option value="{k}"{" selected" if k == first else ""}>cross layer {k.replace(".", ", head ")}</option>'
        for k in large
    )
    o = found.get("overlap", {})
    said = (
        f"top {o['k']} of the ranking vs the reference: {o['shared']} shared; word starts differ by "
        f"{found['word_start_gap_s']} s on average"
        if o
        else "the model lists no alignment heads"
    )
    audio = meta.audio
    maps = json.dumps(large).replace("</", "<\\/")
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>{html.escape(view.table.model)}: {html.escape(audio["clip"])}</title><style>{STYLE}</style></head><body>
<h1>{html.escape(view.table.model)} hears {html.escape(audio["clip"])}</h1>
<p>Transcript, {html.escape(audio["transcript_source"])}: <b>{html.escape(audio["transcript"])}</b></p>
<p class="note">routing check: max |Δ {html.escape(meta.routing_check["compared"])}| =
{meta.routing_check["max_abs_diff"]:.2g} (tolerance {meta.routing_check["tolerance"]:.2g}) against the model's own
eager attention. {html.escape(said)}.</p>
<img alt="log-mel spectrogram" src="{spectrogram(view.mel, found["words"])}" style="width:100%">
<h2>Cross-attention: where each transcript token listens</h2>
<p class="note">Rows: the rows that predict each token (and the end); columns: the clip's 20 ms frames. Red
outline: the model's own alignment heads ({html.escape(str(found.get("reference")))}); ★: attnroute's top
{o.get("k", 1)} by agreement with the consensus alignment. Click a head, or choose one:</p>
<select id="pick">{options}</select>
<img id="large" alt="one cross-attention head, large" src="{large[first]}">
{small}
<h2>Every head, all three modes</h2>
{heads_rows(view.table)}
<script type="application/json" id="maps">{maps}</script>
<script>{SCRIPT}</script>
<p class="note">Built by attnroute in {view.elapsed:.1f} s.</p>
</body></html>"""


__all__ = ["build"]
