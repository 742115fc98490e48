"""Circuits on a speech model: one pair of clips is the prompt set.

    loaded, group, record = clip_run_inputs(settings, say)   # the clips read, the model loaded, one group

A clean and a corrupted clip (the same words, one spoken differently) are read with one decoder text, so
the runs differ in the encoder's input alone (ground/speech.py: ClipPair). The circuits' runs take it as
one group of one prompt pair: every edge of both streams — encoder heads into the encoder's later heads and
into the decoder's cross-attention keys and values, decoder heads into cross-attention queries — is
estimated, path-patched and cut exactly as for text. Refused before the weights load: a clip that cannot
be read; after: a model without an audio encoder.
"""

from __future__ import annotations

from ...audio import audio
from ...models import LoadedModel
from ..ground.speech import ClipGroup, clip_pair
from ..study import Study


def clip_run_inputs(s, say) -> tuple[LoadedModel, ClipGroup, list[dict]]:
    """(the model, the clips as one group, what the result records of them) for settings with clips."""
    a, b = audio(s.audio_clean), audio(s.audio_corrupt)  # read and checked before the weights load
    loaded = Study(s, say=say).load()
    pair = clip_pair(loaded, a, b, s.text, s.answer, s.wrong)
    return loaded, pair.group(loaded), pair.record(loaded)


__all__ = ["clip_run_inputs"]
