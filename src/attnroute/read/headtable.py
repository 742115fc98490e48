"""HeadTable: per-(layer, head) statistics, roles and effects, [L, H] each, with export."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..engine.jsonable import strict

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


@dataclass
class HeadTable:
    model: str
    layers: int
    heads: int
    columns: dict  # name -> np.ndarray [L, H] (NaN where not computed)
    roles: list  # [L][H] role names
    argmax_offsets: np.ndarray  # [L, H, len(OFFSET_BUCKETS)] fractions of rows
    meta: dict = field(default_factory=dict)
    attention: list = field(default_factory=list)  # per layer: "self", "decoder-self" or "cross" (empty: all self)

    def attention_kind(self, layer: int) -> str:
        return self.attention[layer] if self.attention else "self"

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

    def to_dict(self) -> dict:
        out = {"model": self.model, "layers": self.layers, "heads": self.heads, "meta": self.meta}
        for k in ("n_documents", "n_tokens"):
            if k in self.meta:
                out[k] = self.meta[k]
        return {**out, "rows": self.rows()}

    def to_json(self, path) -> None:
        Path(path).write_text(json.dumps(strict(self.to_dict()), indent=1, allow_nan=False))  # NaN -> null

    def to_csv(self, path) -> None:
        rows = self.rows()
        with open(path, "w", newline="") as f:
            fields = ["layer", "head", "attention", "stream_layer", *COLUMNS, *self.extra_columns(), "role"] + [
                f"argmax_{b}" for b in OFFSET_BUCKETS
            ]
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for r in rows:
                offs = r.pop("argmax_offsets")
                w.writerow({**r, **{f"argmax_{b}": v for b, v in offs.items()}})

    def top(self, column: str, k: int = 5, largest: bool = True) -> list[tuple[int, int, float]]:
        values = self.columns[column]
        flat = np.nan_to_num(values.ravel(), nan=-np.inf if largest else np.inf)
        order = np.argsort(-flat if largest else flat)[:k]
        return [(int(i // self.heads), int(i % self.heads), float(values.ravel()[i])) for i in order]

    def with_role(self, role: str) -> list[tuple[int, int]]:
        return [(l, h) for l in range(self.layers) for h in range(self.heads) if self.roles[l][h] == role]


__all__ = ["COLUMNS", "OFFSET_BUCKETS", "HeadTable"]
