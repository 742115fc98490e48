"""The verbs whose speech variant is another run (read/speech): each settles its settings once and goes
to the text room or to the speech wing — the only place a verb asks whether it reads clips.

    circuit(...)     prompt pairs: circuits.circuit; two clips: speech.clip_circuit
    path_patch(...)  prompt pairs: circuits.path; two clips: speech.clip_path_patch
    why(...)         a text: circuits.why; a clip: speech.why_speech

A composition like report.py: it imports rooms and the wing; nothing in read/ imports it.
"""

from __future__ import annotations

from ..settings import CircuitSettings, PathPatchSettings, WhySettings, verb
from . import speech
from .circuits.circuit import circuit as _circuit
from .circuits.path import path_patch as _path_patch
from .circuits.why import why as _why
from .circuits.why_core import WhyResult


@verb(CircuitSettings)
def circuit(model=None, prompts=None, *, settings: CircuitSettings | None = None, progress=None, **fields):
    s = CircuitSettings.of(settings, model, fields, prompts=prompts)
    return speech.clip_circuit(s, progress) if s.clips else _circuit(settings=s, progress=progress)


@verb(PathPatchSettings)
def path_patch(model=None, prompts=None, *, settings: PathPatchSettings | None = None, progress=None, **fields):
    s = PathPatchSettings.of(settings, model, fields, prompts=prompts)
    return speech.clip_path_patch(s, progress) if s.clips else _path_patch(settings=s, progress=progress)


@verb(WhySettings)
def why(
    model=None, text: str | None = None, *, settings: WhySettings | None = None, progress=None, **fields
) -> WhyResult:
    s = WhySettings.of(settings, model, fields, text=text)
    if s.audio is not None:
        from ..progress import reporter

        return speech.why_speech(s, reporter(progress))
    return _why(settings=s, progress=progress)


circuit.__doc__ = _circuit.__doc__
path_patch.__doc__ = _path_patch.__doc__
why.__doc__ = _why.__doc__

__all__ = ["circuit", "path_patch", "why"]
