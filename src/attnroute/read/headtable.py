"""HeadTable: per-(layer, head) statistics, roles and effects, [L, H] each, with export."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..engine.jsonable import Meta, Result

# JSON/CSV columns, in order (the CLI contract adds layer, head and role)
COLUMNS = (
    "entropy",
    "entropy_norm",
    "max_weight",
    "sink_mass",
    "sink_logit_mass",
    "punct_mass",
    "prev_token",
    "duplicate",
    "induction",
    "local",
    "norm_mass",
    "grad_attr",
    "ablation_delta",
    "ablation_mean",
    "ablation_uniform",
    "role_stability",
)
OFFSET_BUCKETS = ("first", "self", "prev", "2-4", "5-16", "17+", "future")


@dataclass(kw_only=True)
class ReadMeta(Meta):
    """What a read says about itself, beside its [L, H] columns: the JSON's ``meta``."""

    kind: str  # causal, encoder, seq2seq
    routing_check: dict | None  # None: skipped (verify=False), so the numbers are not verified
    max_tokens: int | None  # the text's (or a corpus window's) token limit
    column_paths: dict = field(default_factory=dict)  # column -> the backend (or reason) that computed it
    role_thresholds: dict = field(default_factory=dict)
    timings_s: dict = field(default_factory=dict)
    induction_loss: dict | None = None  # causal LMs: loss on the first vs the second repeat

    OPTIONAL = ("induction_loss",)  # left out of the JSON when not measured


@dataclass(kw_only=True)
class TextMeta(ReadMeta):
    """A read of one text (read_heads)."""

    text_tokens: int
    tokens_cut: int
    stimulus: str  # the repeated-token stimulus, described
    effect_batch: str | None = None  # what the effects were measured on (None: no ablation asked)
    grad_vs_ablation: dict | None = None  # the estimate's agreement with the exact ablation
    ablation: dict | None = None  # the statement, modes and heads measured exactly
    tokens: list | None = None  # the tokens of the text as they ran (the BOS prepended included)
    metric: str | None = None  # the user's metric the effects are Δ of (None: the built-in effect)
    effect_prompts: list | None = None  # the prompts it was measured on, with their tokens

    audio: dict | None = None  # a speech model's clip and transcript (how it was had)
    alignment: dict | None = None  # its cross-attention heads against the audio (read/alignment.py)
    memory: dict | None = None  # with max_memory: the cap, what was resident, the batches' scale, the peak, kept

    OPTIONAL = (
        "memory",
        "induction_loss",
        "effect_batch",
        "grad_vs_ablation",
        "ablation",
        "tokens",
        "metric",
        "effect_prompts",
        "audio",
        "alignment",
    )


@dataclass(kw_only=True)
class CorpusMeta(ReadMeta):
    """A read of a corpus (read_corpus): documents, ranks, and which heads matter."""

    corpus: str  # the corpus, described
    grad_attr: str  # what the gradient estimate column is
    n_documents: int
    n_tokens: int
    ranks: int
    importance: dict  # candidates, documents, the test and its correction, significant heads
    interval: str  # what the *_ci columns are
    skipped: dict | None = None  # with skip_bad: how many documents were not text, where and why

    OPTIONAL = ("induction_loss", "skipped")


@dataclass(repr=False)
class HeadTable(Result):
    """Every head of a model as statistics, a role and effects.

    columns         name -> [L, H] float64, NaN where not computed (docs/head-scores.md defines each):
                    entropy (nats) and entropy_norm (0–1, of log(visible keys)); max_weight, sink_mass,
                    sink_logit_mass, punct_mass, local, norm_mass (shares of a row's weight, 0–1);
                    prev_token, duplicate, induction (weight on the one right key, 0–1); grad_attr and
                    ablation_delta / _mean / _uniform (Δ effect: nats of loss, 1 − cosine for an encoder, or
                    your metric's units); role_stability (share of seeds or documents); a corpus read adds
                    *_ci (half-width of the 95 % interval) and ablation_p_holm
    roles           [L][H] role names (read/roles.py)
    argmax_offsets  [L, H, 7] fractions of rows per OFFSET_BUCKETS bucket (NaN without max_weight)
    meta            TextMeta (one text) or CorpusMeta (a corpus)
    attention       per layer: self, decoder-self or cross
    """

    KIND = "heads"

    model: str
    layers: int
    heads: int
    columns: dict  # name -> np.ndarray [L, H] (NaN where not computed)
    roles: list  # [L][H] role names
    argmax_offsets: np.ndarray  # [L, H, len(OFFSET_BUCKETS)] fractions of rows
    meta: ReadMeta | None = None
    attention: list = field(default_factory=list)  # per layer: "self", "decoder-self" or "cross" (empty: all self)

    def attention_kind(self, layer: int) -> str:
        return self.attention[layer] if self.attention else "self"

    def mode(self, layer: int) -> str:
        """encoder (bidirectional self-attention), decoder (causal self-attention) or cross."""
        kind = self.attention_kind(layer)
        if kind == "self":
            return "decoder" if getattr(self.meta, "kind", "causal") == "causal" else "encoder"
        return "cross" if kind == "cross" else "decoder"

    def stream_layer(self, layer: int) -> int:
        """The layer's index among the layers of its own attention kind."""
        kind = self.attention_kind(layer)
        return sum(1 for i in range(layer) if self.attention_kind(i) == kind)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def rows(self) -> list[dict]:
        out = []
        for layer in range(self.layers):
            for head in range(self.heads):
                row = {
                    "layer": layer,
                    "head": head,
                    "attention": self.attention_kind(layer),
                    "mode": self.mode(layer),
                    "stream_layer": self.stream_layer(layer),
                }
                for c in COLUMNS:
                    v = float(self.columns[c][layer, head])
                    row[c] = None if np.isnan(v) else round(v, 6)
                for c in self.extra_columns():  # a corpus read's intervals and adjusted p-values
                    v = float(self.columns[c][layer, head])
                    row[c] = None if np.isnan(v) else round(v, 6)
                row["role"] = self.roles[layer][head]
                row["argmax_offsets"] = {  # null where not computed (no --max-weight, a corpus read)
                    b: None if np.isnan(x) else round(float(x), 4)
                    for b, x in zip(OFFSET_BUCKETS, self.argmax_offsets[layer, head])
                }
                out.append(row)
        return out

    def extra_columns(self) -> list[str]:
        """Columns beyond COLUMNS (a corpus read's *_ci and ablation_p_holm), in a stable order."""
        return sorted(c for c in self.columns if c not in COLUMNS)

    def payload(self) -> dict:
        meta = self.meta.to_dict() if self.meta is not None else {}
        out = {"model": self.model, "layers": self.layers, "heads": self.heads, "meta": meta}
        if isinstance(self.meta, CorpusMeta):
            out.update(n_documents=self.meta.n_documents, n_tokens=self.meta.n_tokens)
        return {**out, "rows": self.rows()}

    FIXED = ("layer", "head", "attention", "mode", "stream_layer", "role", "argmax_offsets")  # a row's non-columns

    @classmethod
    def from_dict(cls, data: dict) -> HeadTable:
        """The table back from its JSON rows (values as written: rounded to 6 decimals, null as NaN)."""
        L, H, rows = data["layers"], data["heads"], data["rows"]
        names = [k for k in rows[0] if k not in cls.FIXED] if rows else list(COLUMNS)
        nan = lambda v: np.nan if v is None else v  # noqa: E731
        columns = {c: np.array([[nan(rows[i * H + h][c]) for h in range(H)] for i in range(L)], float) for c in names}
        offsets = np.array(
            [[[nan(v) for v in rows[i * H + h]["argmax_offsets"].values()] for h in range(H)] for i in range(L)]
        )
        attention = [rows[i * H]["attention"] for i in range(L)]
        m = data["meta"]
        meta = CorpusMeta if "n_documents" in m else TextMeta if "text_tokens" in m else None
        return cls(
            data["model"],
            L,
            H,
            columns,
            [[rows[i * H + h]["role"] for h in range(H)] for i in range(L)],
            offsets.reshape(L, H, len(OFFSET_BUCKETS)),
            meta.from_dict(m) if meta else None,
            [] if set(attention) == {"self"} else attention,
        )

    def to_json(self, path=None, indent: int | None = 1) -> str:
        """The strict JSON of ``to_dict()`` (NaN as null); written to ``path`` too when one is given."""
        text = Result.to_json(self, indent)
        if path is not None:
            Path(path).write_text(text)
        return text

    def csv_text(self) -> str:
        """One CSV row per head: the JSON rows' columns, the argmax offsets spread into columns."""
        f = io.StringIO(newline="")
        fields = ["layer", "head", "attention", "mode", "stream_layer", *COLUMNS, *self.extra_columns(), "role"] + [
            f"argmax_{b}" for b in OFFSET_BUCKETS
        ]
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in self.rows():
            offs = r.pop("argmax_offsets")
            w.writerow({**r, **{f"argmax_{b}": v for b, v in offs.items()}})
        return f.getvalue()

    def to_csv(self, path) -> None:
        Path(path).write_text(self.csv_text(), newline="")

    def top(self, column: str, k: int = 5, largest: bool = True) -> list[tuple[int, int, float]]:
        values = self.columns[column]
        flat = np.nan_to_num(values.ravel(), nan=-np.inf if largest else np.inf)
        order = np.argsort(-flat if largest else flat)[:k]
        return [(int(i // self.heads), int(i % self.heads), float(values.ravel()[i])) for i in order]

    def with_role(self, role: str) -> list[tuple[int, int]]:
        return [(l, h) for l in range(self.layers) for h in range(self.heads) if self.roles[l][h] == role]

    def to_pandas(self):
        """One row per head (the JSON rows; argmax offsets as argmax_* columns): a pandas DataFrame."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("HeadTable.to_pandas needs pandas: pip install pandas") from None
        rows = []
        for r in self.rows():
            offs = r.pop("argmax_offsets")
            rows.append({**r, **{f"argmax_{b}": v for b, v in offs.items()}})
        return pd.DataFrame(rows).set_index(["layer", "head"])

    def summary(self) -> str:
        counts = {}
        for row in self.roles:
            for role in row:
                counts[role] = counts.get(role, 0) + 1
        kinds = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda x: -x[1]))
        tokens = getattr(self.meta, "text_tokens", None) or getattr(self.meta, "n_tokens", None)
        return f"HeadTable({self.model}: {self.layers} layers × {self.heads} heads, {tokens} tokens; {kinds})"

    def __repr__(self) -> str:  # one line: the arrays are in .columns, the rows in .rows()
        return f"<{self.summary()}>"

    def _repr_html_(self) -> str:
        """The role grid (a cell per head, its numbers on hover), the strongest heads per score: HTML with
        no script, every text escaped."""
        from html import escape

        from ..engine.display import card, table
        from .roles import ROLES

        colors = {r.name: r.color for r in ROLES}
        cells = []
        for layer in range(self.layers):
            tds = "".join(
                f'<td title="{escape(self._about(layer, h), quote=True)}" style="width:14px;height:14px;padding:0;'
                f'background:{colors.get(self.roles[layer][h], "#ccc")}"></td>'
                for h in range(self.heads)
            )
            cells.append(f'<tr><td style="font-size:10px;padding-right:4px">{layer}</td>{tds}</tr>')
        legend = " ".join(
            f'<span style="white-space:nowrap"><i style="display:inline-block;width:10px;height:10px;'
            f'background:{r.color}"></i> {escape(r.name)}</span>'
            for r in ROLES
        )
        top = []
        for col in ("induction", "prev_token", "sink_mass", "ablation_delta"):
            if col in self.columns and np.isfinite(self.columns[col]).any():
                top.append(
                    {
                        "score": col,
                        **{f"#{i + 1}": f"L{l}.H{h} {v:.3f}" for i, (l, h, v) in enumerate(self.top(col, 3))},
                    }
                )
        grid = f"<table style='border-collapse:separate;border-spacing:1px'>{''.join(cells)}</table>"
        body = (
            f"<div style='color:#666'>rows: layers; columns: heads; hover a cell</div><div style='display:flex;"
            f"gap:18px;align-items:flex-start'>{grid}<div>{legend}{table(top)}</div></div>"
        )
        return card(self.summary(), body)

    def _about(self, layer: int, h: int) -> str:
        c = self.columns
        parts = [f"L{layer}.H{h} {self.roles[layer][h]}"]
        for name in ("entropy", "sink_mass", "prev_token", "induction", "ablation_delta"):
            if name in c and np.isfinite(c[name][layer, h]):
                parts.append(f"{name} {c[name][layer, h]:.3f}")
        return " · ".join(parts)


__all__ = ["COLUMNS", "OFFSET_BUCKETS", "CorpusMeta", "HeadTable", "ReadMeta", "TextMeta"]
