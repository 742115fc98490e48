"""why(): why a head attends from i to j — the route's score split exactly into (query side, key side) pairs.

    r = why("smollm2", text, head="L18.H6", query="12", key="3")
    r = why("smollm2", text, head="L18.H6", routes="induction")     # the head's score averaged over routes

The score (after scale and soft-cap, before the mask) is bilinear in what the head's query reads at i and
its key reads at j (qk.py): a term per pair (query-side component at i, key-side component at j), with the
components the circuits' senders — the embeddings, each earlier head's write, each earlier MLP's write — and
the biases (the norm's β, projection biases) as one more component per side. Under a soft-cap
c · tanh(s / c) every term is scaled by the capped score over the raw one (said in the result); an additive
position bias (T5) is its own pair. The terms' sum is checked against the score the model computed from its
own q and k: the difference is reported, and over the dtype's split tolerance (engine/tolerance.py) the split is
refused rather than printed.
Over routes: every route's terms averaged (the table), the largest per-route difference reported.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from ...engine.tolerance import split_gap
from ...errors import InputError
from ...settings import WhySettings, verb
from ..adapter import routed
from ..ground.positions import resolve_positions
from ..stimuli import encode_text, tokens_of
from ..study import Study, reads_text
from .graph import Graph
from .layout import CircuitUnsupported, discover, stacks
from .postln import PostLNStream, side_parts
from .qk import Side, split_side
from .why_core import HEAD, ROUTES_MAX, Recorded, WhyResult, existing, no_such_head, receivers, result

DISCOVER = 16  # tokens of the text the stream's layout is found on (it does not depend on the length)


@verb(WhySettings)
def why(model=None, text: str | None = None, *, settings: WhySettings | None = None, progress=None, **fields):
    """The route's score split into (query side, key side) pairs; see the module docstring. The fields are
    WhySettings' (head, query, key, routes, top), or pass ``settings``."""
    s = WhySettings.of(settings, model, fields, text=text)
    st = Study(s, progress, refuse=reads_text("give it a clip: `audio`"))
    say = st.say
    listed, made_on = _listed(s)
    st.facts()  # what can be refused before the weights load (a speech model given text)
    loaded = st.load()
    ids, _ = encode_text(loaded.tokenizer, s.text, None, add_bos=loaded.causal)
    loaded.fit(ids.shape[1], "text", "the text")
    _same_provenance(s.routes, made_on, loaded, tokens_of(loaded.tokenizer, ids[0]))
    say("stage", f"why {s.head} attends where it does: one forward, then its query and key split")
    try:
        layout = discover(loaded, ids[:, :DISCOVER])
    except CircuitUnsupported as e:
        if "post-LN" not in str(e):
            raise
        return _why_post_ln(loaded, s, ids, listed)
    graph = Graph(layout)
    rq, rk, a = receivers(graph, layout, s.head)
    run = Recorded(loaded, layout, graph, ids, a.layer)
    h, kvh = graph.receivers[rq].head, graph.receivers[rk].head
    routes, said = _routes(s, loaded, ids, run, h, listed)
    with torch.no_grad(), routed(loaded, impl="eager"):  # replay() stops the attention module at its call
        qs = split_side(run, rq, sorted({i for i, _ in routes}), run.q[0, h])
        ks = split_side(run, rk, sorted({j for _, j in routes}), run.k[0, kvh])
    return result(s, run, routes, said, (qs, ks), (h, kvh))


def _why_post_ln(loaded, s: WhySettings, ids, listed) -> WhyResult:
    """A post-LN model (BERT, BART): the components carried through every LayerNorm frozen (postln.py)."""
    side, layer, cross, h = HEAD.fullmatch(s.head).groups()
    layer, h = int(layer), int(h)
    stream = "encoder" if side == "E" else "decoder"
    found = dict(stacks(loaded))
    if stream not in found or layer >= len(found[stream]) or h >= loaded.n_heads:
        raise no_such_head(s.head, stream, {name: len(stack) for name, stack in found.items()}, loaded.n_heads)
    index = {id(m): i for i, m in enumerate(loaded.attention_modules)}
    attns = [m for m in found[stream][layer].modules() if id(m) in index]
    kinds = [loaded.attention_kinds[index[id(m)]] for m in attns]
    module = next((m for m, k in zip(attns, kinds, strict=True) if (k == "cross") == bool(cross)), None)
    if module is None:
        raise InputError(f"head {s.head}: layer {layer} has no {'cross-' if cross else ''}attention", field="head")
    g = index[id(module)]
    run = Recorded(loaded, None, None, ids, g)
    kvh = h // (loaded.n_heads // loaded.n_kv_heads)
    routes, said = _routes(s, loaded, ids, run, h, listed)
    split = PostLNStream(loaded, ids)
    sides = []
    for channel, unit, positions, actual in (
        ("q", h, sorted({i for i, _ in routes}), run.q[0, h]),
        ("k", kvh, sorted({j for _, j in routes}), run.k[0, kvh]),
    ):
        read = "kv" if cross and channel == "k" else "x"
        parts, comps = side_parts(split, module, g, read, unit, channel, positions)
        _check_side(parts, actual[positions], f"{s.head}'s {channel}")
        sides.append(Side(parts, [], positions, False, components=comps))
    return result(s, run, routes, said, (sides[0], sides[1]), (h, kvh))


def _check_side(parts: torch.Tensor, actual: torch.Tensor, what: str) -> None:
    gap, ok = split_gap(parts.sum(0), actual)
    if not ok:
        raise CircuitUnsupported(f"{what} split into components misses the model's own by {gap:.3g}")


def _listed(s: WhySettings) -> tuple[list[tuple[int, int]] | None, dict | None]:
    """(the routes named one by one, what a file's routes were made on): index pairs given from Python, or a
    routes file's rows of the head with its model and tokens; (None, None) for query/key or 'induction'."""
    if isinstance(s.routes, tuple):
        return [(int(i), int(j)) for i, j in s.routes], None
    return _routes_file(s.routes, s.head) if s.routes not in (None, "induction") else (None, None)


def _same_provenance(path, made_on: dict | None, loaded, tokens: list[str]) -> None:
    """A routes file's positions index the tokens it was made on, with the model it was made with: on another
    text or model they name other tokens, so the file is refused by name (not split on the wrong positions)."""
    if made_on is None:
        return
    if made_on["model"] is not None and made_on["model"] != loaded.name:
        raise InputError(
            f"routes: {path} was made with {made_on['model']}, and this is {loaded.name}: make the routes with the "
            "same model",
            field="routes",
        )
    theirs = made_on["tokens"]
    if theirs is not None and list(theirs) != list(tokens):
        at = next((i for i, (a, b) in enumerate(zip(theirs, tokens)) if a != b), min(len(theirs), len(tokens)))
        raise InputError(
            f"routes: {path} was made on other tokens than this text's ({len(theirs)} tokens against {len(tokens)}, "
            f"first different at position {at}): run routes on this text, or give why the text the routes were "
            "made on",
            field="routes",
        )


def _routes_file(path: str, head: str) -> tuple[list[tuple[int, int]], dict]:
    """The (query, key) rows of ``head`` in a routes --json file, and what they were made on (model, tokens),
    read before the weights load."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        rows = data["routes"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(
            f"routes must be 'induction' or a routes --json file; {path!r} is not one ({type(e).__name__})",
            field="routes",
        ) from None
    layer, h = (int(x) for x in re.findall(r"\d+", head))
    found = [(int(r["query"]), int(r["key"])) for r in rows if r.get("layer") == layer and r.get("head") == h]
    if not found:
        raise InputError(f"{path} lists no route of {head}: give a routes file of that head", field="routes")
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    return found, {"model": data.get("model"), "tokens": meta.get("tokens")}


def _routes(s: WhySettings, loaded, ids, run: Recorded, h: int, listed) -> tuple[list[tuple[int, int]], str]:
    """The routes to split (only those the head's mask lets exist) and a line saying what was chosen."""
    allowed = run.allowed(h)
    Tq, Tk = allowed.shape
    if listed is not None:
        source = "the pairs given" if isinstance(s.routes, tuple) else s.routes
        wanted, said = listed, f"{len(listed)} routes of {s.head} from {source}"
    elif s.routes == "induction":
        wanted = _induction(ids[0].tolist())
        said = f"{len(wanted)} induction routes (each token → the one after its latest earlier occurrence)"
    else:
        qs = _positions(loaded, s.text, ids, s.query, "query", Tq)
        ks = _positions(loaded, s.text, ids, s.key, "key", Tk)
        wanted, said = [(i, j) for i in qs for j in ks], f"query {s.query!r} → {qs}, key {s.key!r} → {ks}"
    outside = [(i, j) for i, j in wanted if not (i < Tq and j < Tk)]
    if outside:
        raise InputError(f"route {outside[0]} is outside the head's {Tq} queries × {Tk} keys", field="query")
    routes, said = existing(run, h, wanted, s.head, said)
    if len(routes) > ROUTES_MAX:
        raise InputError(f"{len(routes)} routes: at most {ROUTES_MAX} in one call", field="routes")
    return routes, said


def _induction(t: list[int]) -> list[tuple[int, int]]:
    """(i, p + 1) for each position i whose token occurred before, p its latest earlier occurrence."""
    last: dict[int, int] = {}
    out = []
    for i, tok in enumerate(t):
        if tok in last and last[tok] + 1 <= i:
            out.append((i, last[tok] + 1))
        last[tok] = i
    return out


def _positions(loaded, text: str, ids, spec: str, field: str, T: int) -> list[int]:
    """Positions on the text; an encoder-decoder's decoder (it reads its start token) takes indices only."""
    if T == ids.shape[1]:
        return resolve_positions(loaded.tokenizer, text, ids, spec, field)[0]
    if not re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", spec):
        raise InputError(f"{field}: the decoder reads {T} token(s) (its start token): give indices", field=field)
    return sorted({int(x) for x in spec.split(",")})


__all__ = ["WhyResult", "why"]
