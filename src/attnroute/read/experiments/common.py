"""What the experiments share: the model, loaded after the metric's tokens are checked, and the window and
heads an intervention slides over, checked against the model."""

from __future__ import annotations

import os
from collections.abc import Callable

from ...models import LoadedModel, facts_of
from ..ground.text_metric import check_text_metric
from ..study import Study

# refuse(kind, audio, name) -> the experiment's refusal of a model it cannot read, or None; audio None: not known
Refuse = Callable[[str, "bool | None", str], "Exception | None"]


def load_checked(s, say, refuse: Refuse | None = None) -> LoadedModel:
    """The settings' model; a metric's answer tokens are checked on the tokenizer before the weights load, and
    so is the model ``refuse`` names — a speech model given a text, a text model given clips — when the named
    model's facts can tell (else after the load, on the model itself)."""
    named = isinstance(s.model, str | os.PathLike)
    facts = facts_of(s.model) if named or getattr(s, "metric", None) is not None else None
    if (
        facts is not None
        and named
        and refuse is not None
        and (e := refuse(facts.kind, facts.audio, os.fspath(s.model)))
    ):
        raise e
    if getattr(s, "metric", None) is not None and facts is not None:
        check_text_metric(facts.tokenizer, s.metric, s.answer, s.wrong)
    loaded = Study(s, say=say).load()
    if refuse is not None and (e := refuse(loaded.kind, loaded.audio, loaded.name)):
        raise e
    return loaded


def causal_only(error: Callable[[str], Exception]) -> Refuse:
    """A refusal of every model but a causal LM (a Whisper's decoder too: its verbs are the speech ones)."""
    return lambda kind, audio, name: error(name) if kind != "causal" else None


def check_window_heads(loaded, window: int, heads, error) -> None:
    """``window`` layers fit the model and every head of ``heads`` exists; else ``error`` (the experiment's
    refusal class) naming the field."""
    L = loaded.n_layers
    if not 1 <= window <= L:
        raise error(f"window must be between 1 and the model's {L} layers, got {window}", field="window")
    bad = [h for h in heads or [] if not 0 <= h < loaded.n_heads]
    if bad:
        raise error(f"head {bad[0]} does not exist: the model has {loaded.n_heads} heads", field="heads")


__all__ = ["causal_only", "check_window_heads", "load_checked"]
