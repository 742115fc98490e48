"""LearnResult: what a learn experiment returns — the same JSON `attnroute learn --json` writes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.jsonable import STAMP, Result


@dataclass(repr=False)
class LearnResult(Result):
    """One learn experiment, trained and read.

    experiment  its name: induction, scale, pruning, ff, crossattn
    settings    the fields it ran with (its frozen settings, as a dict)
    verdict     {"kind": …, "lines": [str]}: what the curves say, in words
    summary     label -> number or text: the figures behind the verdict
    data        the rest of its JSON, per experiment: ``curves`` (one value per evaluation step: losses in
                nats, head scores as the share of a row's weight on the one right key, [L, H] per step), the
                heads found, ablation shares, per-model ``runs`` …
    """

    KIND = "learn"

    SCHEMA = {"experiment": str, "verdict": {"lines": [str]}, "summary": dict}

    experiment: str
    settings: dict
    verdict: dict
    summary: dict
    data: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> LearnResult:
        keys = ("experiment", "settings", "verdict", "summary")
        data = {k: v for k, v in d.items() if k not in (*keys, STAMP)}  # the stamp is to_dict's, not data
        return cls(*(d.get(k, {}) for k in keys), data=data)

    def payload(self) -> dict:
        return {
            "experiment": self.experiment,
            "settings": self.settings,
            **self.data,
            "verdict": self.verdict,
            "summary": self.summary,
        }


__all__ = ["LearnResult"]
