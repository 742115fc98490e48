"""Results that reload: ``ar.load(path)`` gives back the typed result any verb wrote as JSON.

Every result's JSON carries a stamp, ``"attnroute": {"result": KIND, "format": FORMAT}``
(engine/jsonable.py). A file is read by the one JSON reader (strict, size-bounded: show/jsonout.py),
its stamp checked — a file of another format, or one without a stamp (written before format 1), is
refused by name with what to do — then its contract (the class's SCHEMA) and, for the kinds the report
draws, its sizes (show/sizes.py), and only then built into its class.
"""

from __future__ import annotations

from ..check.audit import CheckRun
from ..engine.jsonable import FORMAT, STAMP, Result
from ..errors import InputError
from ..learn.result import LearnResult
from ..read.circuits import CircuitResult, PathPatchResult, WhyResult
from ..read.circuits.composition import CompositionResult
from ..read.circuits.evaluate import CircuitEvaluation
from ..read.experiments import KnockoutResult, NeedleResult, SwapResult
from ..read.headtable import HeadTable
from ..read.patching import PatchResult, RoutesResult
from ..read.speech import CrossKnockoutResult, CrossSwapResult, SpeechPatchResult, SpeechRoutesResult
from .jsonout import read_json
from .sizes import size_problem

CLASSES: tuple[type[Result], ...] = (
    HeadTable,
    PatchResult,
    RoutesResult,
    CircuitResult,
    PathPatchResult,
    CircuitEvaluation,
    CompositionResult,
    WhyResult,
    KnockoutResult,
    SwapResult,
    NeedleResult,
    SpeechPatchResult,
    SpeechRoutesResult,
    CrossKnockoutResult,
    CrossSwapResult,
    LearnResult,
    CheckRun,
)
BY_KIND = {c.KIND: c for c in CLASSES}
WRITTEN_BY = "attnroute VERB … --json"


def stamp_problem(data: dict) -> str | None:
    """Why ``data`` is no result this attnroute reads — no stamp, another format, an unknown kind — or None."""
    stamp = data.get(STAMP)
    if not isinstance(stamp, dict):
        return f"it has no {STAMP!r} stamp: written by an attnroute before result format {FORMAT}, or not by attnroute"
    if stamp.get("format") != FORMAT:
        return f"it is result format {stamp.get('format')!r}; this attnroute reads format {FORMAT}"
    if stamp.get("result") not in BY_KIND:
        return f"its kind {stamp.get('result')!r} is none of {', '.join(BY_KIND)}"
    return None


def checked(path, field: str = "path", kinds: tuple[str, ...] | None = None) -> tuple[type[Result], dict]:
    """The class and JSON of one result file, stamp, contract and sizes checked; refused in one line."""
    written_by = f"attnroute {'|'.join(kinds)} … --json" if kinds else WRITTEN_BY
    data = read_json(path, field, written_by)
    if problem := stamp_problem(data):
        raise InputError(f"{field} {path}: {problem}; write it again with `{written_by}`", field=field)
    cls = BY_KIND[data[STAMP]["result"]]
    if kinds is not None and cls.KIND not in kinds:
        raise InputError(f"{field} {path}: a {cls.KIND} result; expected one of {', '.join(kinds)}", field=field)
    if problem := cls.validate(data) or size_problem(cls.KIND, data):
        raise InputError(f"{field} {path}: not a whole {cls.KIND} result: {problem}", field=field)
    return cls, data


def load(path, *, field: str = "path", kinds: tuple[str, ...] | None = None) -> Result:
    """The typed result (PatchResult, CircuitResult, HeadTable, …) a verb wrote to ``path``; ``kinds``
    narrows what is accepted. A file that is not one is refused in one line naming ``field``."""
    cls, data = checked(path, field, kinds)
    try:
        result = cls.from_dict(data)
        result.partial = data.get("partial")  # a result written before its verb finished stays marked
        return result
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as e:
        raise InputError(
            f"{field} {path}: a {cls.KIND} result with a missing or malformed field ({type(e).__name__}: {e})",
            field=field,
        ) from None


__all__ = ["BY_KIND", "CLASSES", "checked", "load", "stamp_problem"]
