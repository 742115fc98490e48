"""What the experiments share: the model, loaded after the metric's tokens are checked, and the window and
heads an intervention slides over, checked against the model."""

from __future__ import annotations

from ...models import LoadedModel
from ..ground.text_metric import check_text_metric
from ..study import Refuse, Study


def load_checked(s, say, refuse: Refuse | None = None) -> LoadedModel:
    """The settings' model; a metric's answer tokens are checked on the tokenizer before the weights load, and
    ``refuse`` (Study's) is asked of the named model's facts then and of the loaded model after."""
    st = Study(s, say=say, refuse=refuse)
    if getattr(s, "metric", None) is not None and (facts := st.facts()) is not None:
        check_text_metric(facts.tokenizer, s.metric, s.answer, s.wrong)
    return st.load()


def check_window_heads(loaded, window: int, heads, error) -> None:
    """``window`` layers fit the model and every head of ``heads`` exists; else ``error`` (the experiment's
    refusal class) naming the field."""
    L = loaded.n_layers
    if not 1 <= window <= L:
        raise error(f"window must be between 1 and the model's {L} layers, got {window}", field="window")
    bad = [h for h in heads or [] if not 0 <= h < loaded.n_heads]
    if bad:
        raise error(f"head {bad[0]} does not exist: the model has {loaded.n_heads} heads", field="heads")


__all__ = ["check_window_heads", "load_checked"]
