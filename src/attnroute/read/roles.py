"""Role labels from head statistics, with documented thresholds.

A head gets the first role whose rule holds, in this order (scores as defined in
../shared/SCORES.md and stimuli.py; masses are means over query rows that see ≥ 2 keys):

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
reader can change them and see the labels move.
"""

from __future__ import annotations

ROLES = ("induction", "previous-token", "duplicate", "sink/delimiter", "local", "broad", "mixed")
THRESHOLDS = {"induction": 0.30, "previous-token": 0.50, "duplicate": 0.30, "sink/delimiter": 0.60,
              "local": 0.70, "broad": 0.80}


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
