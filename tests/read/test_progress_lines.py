"""A long Python call in a plain script says what it is doing on stderr (a six-minute ar.patch printed
nothing); progress=False keeps it silent; a callable still gets every event."""

from __future__ import annotations

import attnroute as ar
from attnroute.models import load
from attnroute.progress import StderrLines

from .zoo import build

TEXT = "the cat sat on the mat and the cat sat on the hat"


def test_a_plain_script_sees_the_stages_and_false_silences_them(tmp_path, capsys):
    loaded = load(str(build("llama", tmp_path)))
    capsys.readouterr()
    ar.why(loaded, TEXT, head="L1.H3", query="11", key="4")
    said = capsys.readouterr().err.splitlines()
    assert said and all(line.startswith("attnroute [") for line in said) and any("stage: why L1.H3" in x for x in said)
    ar.why(loaded, TEXT, head="L1.H3", query="11", key="4", progress=False)
    assert capsys.readouterr().err == ""
    events = []
    ar.why(loaded, TEXT, head="L1.H3", query="11", key="4", progress=events.append)
    assert events and capsys.readouterr().err == ""


def test_counts_in_between_are_thinned_but_the_last_is_said(capsys, monkeypatch):
    from attnroute.progress import Event

    lines = StderrLines()
    for done in range(1, 101):
        lines(Event("patch", "runs", done, 100))
    said = capsys.readouterr().err.splitlines()
    assert said[-1].endswith("patch: runs 100/100") and len(said) <= 3
