"""Circuits and path patching on a speech model: one pair of clips is the prompt set.

    loaded, group, record = clip_run_inputs(settings, say)   # the clips read, the model loaded, one group
    clip_circuit(settings, progress)                          # circuit() between two clips
    clip_path_patch(settings, progress)                       # path_patch() between two clips

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
from ..circuits.circuit import CircuitResult, run_circuit
from ..circuits.graph import Graph
from ..circuits.layout import discover
from ..circuits.nodes import resolve_edges
from ..circuits.path import PathPatchResult, measure_edge
from ..ground.group import Shard
from ..ground.metrics import resolve
from ..ground.speech import ClipGroup, clip_pair, no_audio_encoder
from ..study import Study, hears_audio


def clip_run_inputs(s, say) -> tuple[LoadedModel, ClipGroup, list[dict]]:
    """(the model, the clips as one group, what the result records of them) for settings with clips."""
    a, b = audio(s.audio_clean), audio(s.audio_corrupt)  # read and checked before the weights load
    loaded = Study(s, say=say, refuse=hears_audio(no_audio_encoder)).load()
    pair = clip_pair(loaded, a, b, s.text, s.answer, s.wrong)
    return loaded, pair.group(loaded), pair.record(loaded)


def clip_circuit(s, progress=None) -> CircuitResult:
    """A circuit between two clips on a speech model: one pair, one rank, no checkpoint (minutes, not hours)."""
    study = Study(s, progress, "circuit discovery")
    study.metric_name, study.metric = resolve(s.metric)
    study.loaded, group, study.record = clip_run_inputs(s, study.say)
    study.shard = Shard(1, 0, 1)
    study.say("stage", "finding the residual stream's writers and readers (one short forward)")
    layout = discover(study.loaded, group.clean)
    graph = Graph(layout)
    return run_circuit(study, layout, graph, [group], resolve_edges(graph, s.edges or ()), None)


def clip_path_patch(s, progress=None) -> PathPatchResult:
    """One edge path-patched between two clips."""
    st = Study(s, progress)
    st.metric_name, fn = resolve(s.metric)
    st.loaded, group, st.record = clip_run_inputs(s, st.say)
    return measure_edge(st, [group], fn)


__all__ = ["clip_circuit", "clip_path_patch", "clip_run_inputs"]
