"""Role labels from head statistics: the one home of every role's name, rule, threshold and colour.

A head gets the first role whose rule holds, in this order (scores defined in docs/head-scores.md;
masses are means over query rows that see ≥ 2 keys):

    induction        induction ≥ 0.30 and induction > prev_token
    previous-token   prev_token ≥ 0.50
    duplicate        duplicate ≥ 0.30
    sink/delimiter   sink_mass + punct_mass ≥ 0.60   (first position, BOS/[CLS]/[SEP], punctuation)
    local            local ≥ 0.70                     (|query − key| < 4)
    broad            entropy_norm ≥ 0.80              (close to uniform over the visible keys)
    mixed            otherwise

The thresholds are round numbers set where TransformerLens' demos call heads "pretty much perfect"
previous-token heads (scores near 1) and induction heads that "score extremely highly"; a score of
0.3 on a 40-token stimulus is already ~12× the uniform baseline. They are constants here so a
reader can change them and see the labels move; the terminal tables, the PNG figures and the HTML
page all read names and colours from ROLES (the page receives them as data).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Role:
    name: str
    column: str  # the HeadTable column that ranks heads of this role
    threshold: float | None  # None: the fallback role
    color: str  # one colour per role everywhere it is drawn

    def to_dict(self) -> dict:
        return asdict(self)


ROLES = (
    Role("induction", "induction", 0.30, "#d62728"),
    Role("previous-token", "prev_token", 0.50, "#1f77b4"),
    Role("duplicate", "duplicate", 0.30, "#9467bd"),
    Role("sink/delimiter", "sink_mass", 0.60, "#7f7f7f"),
    Role("local", "local", 0.70, "#2ca02c"),
    Role("broad", "entropy_norm", 0.80, "#ff7f0e"),
    Role("mixed", "entropy", None, "#c7c7c7"),
)
ROLE_NAMES = tuple(r.name for r in ROLES)
THRESHOLDS = {r.name: r.threshold for r in ROLES if r.threshold is not None}
COLORS = {r.name: r.color for r in ROLES}


def label(stats: dict) -> str:
    """stats: one head's scalar statistics."""
    if stats["induction"] >= THRESHOLDS["induction"] and stats["induction"] > stats["prev_token"]:
        return "induction"
    if stats["prev_token"] >= THRESHOLDS["previous-token"]:
        return "previous-token"
    if stats["duplicate"] >= THRESHOLDS["duplicate"]:
        return "duplicate"
    if stats["sink_mass"] + stats.get("punct_mass", 0.0) >= THRESHOLDS["sink/delimiter"]:
        return "sink/delimiter"
    if stats["local"] >= THRESHOLDS["local"]:
        return "local"
    if stats["entropy_norm"] >= THRESHOLDS["broad"]:
        return "broad"
    return "mixed"


ROLE_INPUTS = ("induction", "prev_token", "duplicate", "sink_mass", "punct_mass", "local", "entropy_norm")


def label_grid(cols: dict, overrides: dict | None = None) -> list[list[str]]:
    """Every head's role, [L][H] names, from [L, H] columns (``overrides`` replaces some columns, e.g.
    one probe seed's scores, to see whether the role holds under them)."""
    cols = {**cols, **(overrides or {})}
    L, H = cols["entropy_norm"].shape
    return [[label({k: float(cols[k][layer, h]) for k in ROLE_INPUTS}) for h in range(H)] for layer in range(L)]


def one_hot(names: list[list[str]]):
    """[L, H, roles] with a 1 at each head's role (a corpus counts roles over documents)."""
    import numpy as np

    L, H = len(names), len(names[0])
    out = np.zeros((L, H, len(ROLE_NAMES)))
    for layer in range(L):
        for h in range(H):
            out[layer, h, ROLE_NAMES.index(names[layer][h])] = 1
    return out


__all__ = ["COLORS", "ROLES", "ROLE_INPUTS", "ROLE_NAMES", "THRESHOLDS", "Role", "label", "label_grid", "one_hot"]
