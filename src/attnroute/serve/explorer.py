"""The explorer's model work, without HTTP: one LoadedModel, the requests of the page as methods.

Every method returns JSON-ready data and runs on the server's one worker thread (worker.py): nothing
here is called concurrently. ``job`` (worker.Job) receives progress and is the cancellation point:
``job.check()`` raises Cancelled between forwards when the client went away or the time ran out.

    text(text)                     the grid: per-head statistics and roles of the text, its tokens, top 5
    head(text, layer, head)        one head's weights [T, T] (log8 codes) and value norms, run lazily
    token(text, index)             every head's routes out of / into one token: row and column, per head
    cut(text, cuts, target)        the top 5 next tokens and p(target) before and after the cuts
    pair(clean, corrupt, …)        activation patching (heads, q/k/v) and the top routes of a prompt pair
    verify(clean, …, route)        one route of the pair knocked out exactly: Δ metric
    report(text)                   the offline report page of the text

A cut of a route is KnockoutEdges([query], [key], [head], layer) — the same intervention, the same
eager path and the same measurement as ``attnroute.knockout(..., window=1, heads=[head])`` on that
layer, so the two give the same numbers (tested to 1e-6). A cut of a head is ZeroHead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ..engine import KnockoutEdges, ZeroHead
from ..errors import InputError, readable_text
from ..models import LoadedModel
from ..read.adapter import routed
from ..read.capture import capture_weights, sink_positions
from ..read.heads import DEFAULT_TEXT, Reuse, read_heads, reusable
from ..read.patching.suffix import windowed
from ..read.stimuli import encode_text, tokens_of
from ..settings import SERVE_TOKENS, SETTLE_FIRST, HeadsSettings, integer
from ..settings.patching import edge_labels
from ..show.explorer import saved_page, text_grid
from ..show.weights import head_payload
from .errors import RequestError

CIRCUIT_SHOWN = 40  # edges the page's circuit graph draws (the strongest by exact, else estimate)

TOP = 5  # next tokens shown before and after a cut
MAX_CUTS = 64
POSITION = "a token position"


@dataclass
class TextState:
    """One text as the model ran it: what every later request on the text starts from."""

    ids: torch.Tensor  # [1, T]
    tokens: list[str]
    grid: dict  # the page's grid data (JSON-ready)
    clean: torch.Tensor | None  # last-position logits (causal) or the pooled embedding (encoder), fp32
    table: object = None  # the HeadTable of the text (the saved report's page reuses it)


def refuse_kind(kind: str, audio: bool | None = False) -> None:
    """The explorer reads causal LMs, encoders and speech models (serve/speech.py); any other encoder–decoder
    is a refusal of the command (exit 2), said before the weights load when the model's config can be read
    alone (server.prepare). ``audio``: the model hears audio (a speech model), or None: not known yet."""
    if kind == "seq2seq" and audio is False:
        raise InputError(
            "the explorer reads causal LMs, encoders and speech models (whisper-tiny); for a text "
            "encoder-decoder use `attnroute report`",
            field="model",
        )


def head_name(loaded, layer: int, head: int) -> str:
    """A head named as the verbs name it: E2.H0 in an encoder's stack, L2.H0 in a decoder's, L2.xH0 across."""
    mode, at = loaded.mode(layer), loaded.stream_layer(layer)
    return {"encoder": f"E{at}.H{head}", "cross": f"L{at}.xH{head}"}.get(mode, f"L{at}.H{head}")


class Explorer:
    def __init__(self, loaded: LoadedModel, max_tokens: int | None = None, progress=None):
        refuse_kind(loaded.kind)
        self.loaded = loaded
        if max_tokens is None:  # 1024, or the model's positions if fewer
            self.max_tokens = min(SERVE_TOKENS, loaded.max_positions or SERVE_TOKENS)
        else:
            self.max_tokens = loaded.fit(max_tokens, "max_tokens", "max_tokens") if loaded.max_positions else max_tokens
        self.settings = HeadsSettings.from_name("report", model=loaded, ablation=False)
        t0 = time.perf_counter()
        self.reuse: Reuse = reusable(loaded, self.settings, progress)  # routing check + repeated tokens, once
        self.startup_s = time.perf_counter() - t0
        self._texts: dict[str, TextState] = {}  # a few recent texts (their grids are also in the result cache)

    # ---------------------------------------------------------------- what the page shows first
    def info(self) -> dict:
        m = self.loaded
        return {
            "model": m.name,
            "kind": m.kind,
            "layers": m.n_layers,
            "heads": m.n_heads,
            "kv_heads": m.n_kv_heads,
            "max_tokens": self.max_tokens,
            "default_text": DEFAULT_TEXT,
            "routing_check": self.reuse.routing_check,
        }

    def state(self, text: str, job) -> TextState:
        """The text's state, computed once per text (the grid: one read of the text, ~1 s at 60 tokens)."""
        if text in self._texts:
            return self._texts[text]
        ids = self.encode(text)
        job.say("reading the text's routing", 0, 2)
        table = read_heads(settings=self.settings.replace(text=text), progress=job.progress, reuse=self.reuse)
        job.check()
        job.say("the clean run", 1, 2)
        clean = self.outputs(ids, [])
        top = self.top(clean) if self.loaded.causal else None
        tokens = tokens_of(self.loaded.tokenizer, ids[0])
        grid = text_grid(table, tokens, sink_positions(self.loaded.tokenizer, ids), top)
        st = TextState(ids, grid["tokens"], grid, clean, table)
        self._texts = {**dict(list(self._texts.items())[-3:]), text: st}  # the last four texts
        return st

    def encode(self, text: str) -> torch.Tensor:
        if not isinstance(text, str) or not text.strip():
            raise RequestError(400, "text: expected a non-empty string")
        readable_text(text, "text")  # a lone surrogate (valid JSON) is a 400 naming the field, not a 500
        ids, _ = encode_text(self.loaded.tokenizer, text, None)
        if ids.shape[1] > self.max_tokens:
            raise RequestError(
                413, f"the text is {ids.shape[1]} tokens; this server reads at most {self.max_tokens} (--max-tokens)"
            )
        return ids

    def text(self, text: str, job) -> dict:
        return self.state(text, job).grid

    # ---------------------------------------------------------------- weights, lazily
    def _layer_head(self, layer, head) -> tuple[int, int]:
        return in_range(layer, "layer", self.loaded.n_layers), in_range(head, "head", self.loaded.n_heads)

    def head(self, text: str, layer, head, job) -> dict:
        """One head's weights: one eager forward keeping only that head (a long text's L·H·T² weights are
        never held), with its value norms for the value-norm-weighted map."""
        layer, head = self._layer_head(layer, head)
        st = self.state(text, job)
        job.say(f"L{layer}.H{head}: one forward keeping its weights", 0, 1)
        norms: dict = {}
        kept = capture_weights(self.loaded, st.ids, norms, select=lambda l, w: w[head].numpy() if l == layer else None)
        return {"layer": layer, "head": head, **head_payload(kept[layer]), "norms": _round(norms[layer][head])}

    def why(self, text: str, layer, head, query, key, job) -> dict:
        """Why head L.H attends from ``query`` to ``key``: the route's score split into (query side, key side)
        pairs (ar.why), on the text as the explorer reads it."""
        from ..read.verbs import why

        layer, head = self._layer_head(layer, head)
        st = self.state(text, job)
        T = st.ids.shape[1]
        query, key = in_range(query, "query", T, POSITION), in_range(key, "key", T, POSITION)
        name = head_name(self.loaded, layer, head)
        job.say(f"why {name} attends {query} → {key}: one forward, its q and k split", 0, 1)
        try:
            return why(self.loaded, text, head=name, query=str(query), key=str(key), top=12).to_dict()
        except InputError as e:  # a masked route, a post-LN model: said to the page in one line
            raise RequestError(422, str(e)) from None

    def token(self, text: str, index, job) -> dict:
        """Every head's routes out of token ``index`` (its row) and into it (its column): [L][H] payloads."""
        st = self.state(text, job)
        T = st.ids.shape[1]
        index = in_range(index, "index", T, POSITION)
        job.say(f"token {index}: one forward keeping its row and column in every head", 0, 1)
        kept = capture_weights(
            self.loaded, st.ids, select=lambda l, w: torch.stack([w[:, index, :], w[:, :, index]], 1).numpy()
        )  # per layer (H, 2, T)
        out = np.stack([k[:, 0] for k in kept])  # (L, H, T)
        into = np.stack([k[:, 1] for k in kept])
        return {"index": index, "out": head_payload(out.reshape(-1, T)), "into": head_payload(into.reshape(-1, T))}

    def effect(self, text: str, query, key, target, job) -> dict:
        """The route query → key in every head: its weight A_ij, and the estimated change of p(target) at the
        last position were it cut (the row renormalized: o_i moves by A_ij (o_i − v_j) / (1 − A_ij), read by
        the gradient at the head's output — route attribution's estimate, for this one route): [L][H] each."""
        if not self.loaded.causal:
            raise RequestError(
                422,
                f"effect estimates a route's effect on the next token's probability; {self.loaded.name} is an "
                f"{self.loaded.kind} with no next token: cut the route to see its effect on the sentence embedding",
            )
        st = self.state(text, job)
        T = st.ids.shape[1]
        i, j = in_range(query, "query", T, POSITION), in_range(key, "key", T, POSITION)
        if j > i:
            raise RequestError(400, f"key {j} comes after query {i}: a causal model has no such route")
        tid = self.target_id(target, st.clean)
        job.say(f"route {i} → {j}: its weight and estimated effect in every head", 0, 1)
        weights = np.stack(capture_weights(self.loaded, st.ids, select=lambda l, w: w[:, i, j].numpy()))  # (L, H)
        dO, o, v = self._row_gradients(st.ids, i, j, tid)
        G = self.loaded.n_heads // self.loaded.n_kv_heads
        kv = torch.arange(self.loaded.n_heads) // G
        A = torch.from_numpy(weights).double()
        shift = (dO * (o - v[:, kv])).sum(-1)  # (L, H): dO_i · (o_i − v_j)
        est = torch.where(A < 1, A / (1 - A).clamp_min(1e-12), torch.zeros_like(A)) * shift
        name = f"p({self.loaded.tokenizer.decode([tid])!r})"
        rows = lambda a: [_round(r) for r in a]  # noqa: E731  ([L][H], 4 significant digits)
        return {"query": i, "key": j, "metric": name, "weights": rows(weights), "estimate": rows(est.numpy())}

    def _row_gradients(self, ids, i: int, j: int, tid: int):
        """Per layer: ∂p(target)/∂o_i at every head's output row i, o_i, and v_j per kv head (float64)."""
        kept: dict = {}

        def before(layer, module, q, k, v):
            kept[(layer, "v")] = v[0, :, j].detach().double()

        def after(layer, out):
            out.retain_grad()
            kept[(layer, "o")] = out
            return out

        with torch.enable_grad(), routed(self.loaded, before_attend=[before], after_attend=[after]):
            logits = self.loaded.model(input_ids=ids).logits[0, -1]
            torch.softmax(logits.float(), -1)[tid].backward()
        L = self.loaded.n_layers
        dO = torch.stack([kept[(l, "o")].grad[0, :, i].double() for l in range(L)])
        o = torch.stack([kept[(l, "o")][0, :, i].detach().double() for l in range(L)])
        return dO, o, torch.stack([kept[(l, "v")] for l in range(L)])

    # ---------------------------------------------------------------- cuts
    def interventions(self, cuts, T: int, ids: torch.Tensor | None = None) -> list:
        if not isinstance(cuts, list) or len(cuts) > MAX_CUTS:
            raise RequestError(400, f"cuts: expected a list of at most {MAX_CUTS} cuts")
        made = []
        for n, c in enumerate(cuts):
            if not isinstance(c, dict) or c.get("kind") not in ("route", "head"):
                raise RequestError(400, f"cut {n}: expected {{kind: 'route' | 'head', layer, head, …}}")
            layer, head = self._layer_head(c.get("layer"), c.get("head"))
            if c["kind"] == "head":
                made.append(ZeroHead([head], layer=layer))
                continue
            q, k = (in_range(c.get(name), f"cut {n}: {name}", T, POSITION) for name in ("query", "key"))
            if self.loaded.causal and k > q:
                raise RequestError(400, f"cut {n}: key {k} comes after query {q}: a causal model has no such route")
            if ids is not None and windowed(self.loaded) and not self._exists(ids, q, k)[layer]:
                raise RequestError(
                    400, f"cut {n}: key {k} is beyond layer {layer}'s window from query {q}: no such route"
                )
            made.append(KnockoutEdges([q], [k], [head], layer=layer))
        return made

    def _exists(self, ids: torch.Tensor, q: int, k: int) -> list[bool]:
        """Per layer, whether the route q → k exists under that layer's own mask (a windowed model's)."""
        from ..read.experiments.knockout import route_layers

        return route_layers(self.loaded, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, [q], [k])

    @torch.no_grad()
    def outputs(self, ids: torch.Tensor, interventions: list) -> torch.Tensor:
        """Causal: the last position's logits [V] as `knockout` measures them (attend's auto choice: the fused
        kernel on every layer no cut touches); encoder: the mean-pooled sentence embedding [C]."""
        from ..read.adapter import routed
        from ..read.ground.batches import last_logits

        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        keep = last_logits(self.loaded) if self.loaded.causal else {}
        with routed(self.loaded, interventions=interventions, impl="auto"):
            out = self.loaded.model(**batch, **keep)
        if self.loaded.causal:
            return out.logits[0, -1].float()
        return out.last_hidden_state[0].float().mean(0)

    def top(self, logits: torch.Tensor) -> list[dict]:
        p = torch.softmax(logits, -1)
        vals, idx = p.topk(TOP)
        return [
            {"token": self.loaded.tokenizer.decode([int(i)]), "id": int(i), "p": float(v)} for v, i in zip(vals, idx)
        ]

    def target_id(self, target, clean: torch.Tensor) -> int:
        if target is None or target == "":
            return int(clean.argmax())
        if not isinstance(target, str):
            raise RequestError(400, "target: expected a token as text, e.g. ' Paris'")
        ids = self.loaded.tokenizer(target, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise RequestError(400, f"target {target!r} is {len(ids)} tokens; give one token")
        return int(ids[0])

    def cut(self, text: str, cuts, target, job) -> dict:
        st = self.state(text, job)
        made = self.interventions(cuts, st.ids.shape[1], st.ids)
        job.say(f"running the model with {len(made)} cut(s)", 0, 1)
        after = self.outputs(st.ids, made) if made else st.clean
        if not self.loaded.causal:
            cos = float(torch.nn.functional.cosine_similarity(st.clean, after, dim=0))
            return {
                "kind": "encoder",
                "metric": {
                    "name": "cosine to the clean sentence embedding",
                    "before": 1.0,
                    "after": cos,
                    "delta": cos - 1.0,
                },
            }
        tid = self.target_id(target, st.clean)
        pb, pa = torch.softmax(st.clean, -1), torch.softmax(after, -1)
        tok = self.loaded.tokenizer.decode([tid])
        return {
            "kind": "causal",
            "target": {"token": tok, "id": tid},
            "before": {"top": self.top(st.clean), "p": float(pb[tid]), "logprob": float(torch.log(pb[tid]))},
            "after": {"top": self.top(after), "p": float(pa[tid]), "logprob": float(torch.log(pa[tid]))},
            "metric": {
                "name": f"p({tok!r})",
                "before": float(pb[tid]),
                "after": float(pa[tid]),
                "delta": float(pa[tid] - pb[tid]),
            },
            "cuts": len(made),
        }

    # ---------------------------------------------------------------- prompt pairs
    def _pair_fields(self, clean, corrupt, answer, wrong) -> dict:
        for name, v in (("clean", clean), ("corrupt", corrupt), ("answer", answer), ("wrong", wrong)):
            if not isinstance(v, str) or not v.strip():
                raise RequestError(400, f"{name}: expected a non-empty string")
        for v in (clean, corrupt):
            self.encode(v)  # the token limit
        return {"clean": clean, "corrupt": corrupt, "answer": answer, "wrong": wrong}

    def pair(self, clean, corrupt, answer, wrong, job) -> dict:
        """Patching of heads and their q/k/v (denoising), and the top routes by attribution, on one pair."""
        from ..read.patching import patch, route_attribution

        f = self._pair_fields(clean, corrupt, answer, wrong)
        if not self.loaded.causal:
            raise RequestError(400, "prompt pairs measure a logit difference: the model must be a causal LM")
        job.say("patching heads and q/k/v", 0, 2)
        # exact for the top 20 of the estimate per site (the first round of `attnroute patch`'s settling):
        # a page answers in seconds; the table says which rows are exact
        # no checkpoint: a page answers in seconds, and a server writes nothing to the user's cache unasked
        p = patch(
            self.loaded,
            sites=("head", "q", "k", "v"),
            exact=SETTLE_FIRST,
            progress=job.progress,
            no_checkpoint=True,
            **f,
        )
        job.check()
        job.say("route attribution", 1, 2)
        r = route_attribution(self.loaded, top=20, verify=5, progress=job.progress, no_checkpoint=True, **f)
        return {
            "patch": p.to_dict(),
            "grid": {k: np.asarray(v).tolist() for k, v in p.grid.items()},
            "routes": r.to_dict(),
        }

    def circuit(self, clean, corrupt, answer, wrong, job) -> dict:
        """The pair's circuit (ar.circuit: every edge estimated, the first round of the estimate's top measured
        exactly, the faithfulness curve): the SHOWN strongest edges for the page's graph, and the summary."""
        from ..read.verbs import circuit

        f = self._pair_fields(clean, corrupt, answer, wrong)
        if not self.loaded.causal:
            raise RequestError(400, "circuits of a prompt pair need a causal LM here")
        job.say("circuit: every edge estimated, the top measured exactly, circuits run whole", 0, 1)
        try:
            d = circuit(self.loaded, exact=SETTLE_FIRST, progress=job.progress, no_checkpoint=True, **f).to_dict()
        except InputError as e:  # a post-LN model, a stream that does not add up
            raise RequestError(422, str(e)) from None
        return {
            "edges": d["edges"][:CIRCUIT_SHOWN],
            "circuit": {k: d["circuit"][k] for k in ("cpr", "cmd", "target", "checks")},
            "chosen": {k: d["circuit"]["chosen"].get(k) for k in ("k", "faithfulness")},
            "meta": {k: d["meta"][k] for k in ("metric", "estimate", "layers", "heads", "kv_heads", "edges")},
            "verdict": d["verdict"],
        }

    def path(self, clean, corrupt, answer, wrong, edge, job) -> dict:
        """One edge of the pair path-patched exactly (ar.path_patch), ``edge`` as the circuit names it."""
        from ..read.verbs import path_patch

        f = self._pair_fields(clean, corrupt, answer, wrong)
        try:
            ((sender, receiver),) = edge_labels(edge if isinstance(edge, str) else [edge])  # circuit's own parser
        except InputError as e:
            raise RequestError(400, str(e)) from None
        channel = None
        if receiver.endswith((".q", ".k", ".v")):
            receiver, channel = receiver[:-2], receiver[-1]
        job.say(f"path patching {edge}", 0, 1)
        try:
            r = path_patch(self.loaded, sender=sender, receiver=receiver, channel=channel, **f).to_dict()
        except InputError as e:
            raise RequestError(422, str(e)) from None
        return {"edge": edge, "exact": r["edge"]["exact"], "estimate": r["edge"]["estimate"], "metric": "logit-diff"}

    def verify(self, clean, corrupt, answer, wrong, route, job) -> dict:
        """One route of the clean prompt knocked out exactly (every layer after it rerun): Δ logit-diff."""
        f = self._pair_fields(clean, corrupt, answer, wrong)
        if not self.loaded.causal:
            raise RequestError(400, "verifying a route measures a logit difference: the model must be a causal LM")
        if not isinstance(route, dict) or set(route) - {"layer", "head", "query", "key", "kind"}:
            raise RequestError(400, "route: expected {layer, head, query, key}")
        ids = self.encode(clean)
        made = self.interventions([{**route, "kind": "route"}], ids.shape[1], ids)
        a, w = self.target_id(f["answer"], torch.zeros(1)), self.target_id(f["wrong"], torch.zeros(1))
        job.say("the route knocked out", 0, 1)
        base, cut = self.outputs(ids, []), self.outputs(ids, made)
        before, after = float(base[a] - base[w]), float(cut[a] - cut[w])
        return {"route": route, "metric": "logit-diff", "before": before, "after": after, "exact": after - before}

    # ---------------------------------------------------------------- the offline page
    def report(self, text: str, cuts, heads, token, target, job) -> str:
        """The offline report page of what is on screen: the text's page, opening on the heads and token
        shown, with the cuts made and their answer — for the target the user chose — before and after."""
        from ..read.report import RoutingView

        t0 = time.perf_counter()
        if cuts is not None and not isinstance(cuts, list):
            raise RequestError(400, f"cuts: expected a list of cuts, got {type(cuts).__name__}")
        st = self.state(text, job)
        opened = self._opened(heads, token, st.ids.shape[1])
        answer = self.cut(text, cuts or [], target, job) if cuts else None
        job.say("capturing every head's weights for the page", 0, 1)
        norms: dict = {}
        weights = capture_weights(self.loaded, st.ids, norms)
        m = self.loaded
        view = RoutingView(
            st.table,  # the text's read, made once for its grid
            m.tokenizer.convert_ids_to_tokens(st.ids[0].tolist()),
            weights,
            m.model.config,
            m.n_kv_heads,
            m.max_positions,
            time.perf_counter() - t0,
            value_norms=[norms[layer] for layer in range(m.n_layers)],
            sink_keys=st.grid["sink_keys"],
        )
        return saved_page(view, opened, cuts or [], answer, st.tokens)

    def _opened(self, heads, token, T: int) -> dict:
        if heads is None:
            heads = []
        if not isinstance(heads, list) or len(heads) > 2 or not all(isinstance(x, list) and len(x) == 2 for x in heads):
            raise RequestError(400, "heads: expected at most two [layer, head] pairs")
        for layer, head in heads:
            self._layer_head(layer, head)
        if token is not None:
            in_range(token, "token", T, POSITION)
        return {"heads": heads, "token": token}


def in_range(value, name: str, n: int, what: str = "an integer") -> int:
    """An integer in 0 … n − 1 (bools refused), or 400 naming ``name``: settings.integer, as a request error."""
    try:
        return integer(value, name, 0, n - 1)
    except InputError:
        raise RequestError(400, f"{name}: expected {what} in 0 … {n - 1}, got {value!r}") from None


def _round(a: np.ndarray) -> list:
    return [None if not np.isfinite(x) else float(f"{x:.4g}") for x in np.asarray(a, dtype=np.float64)]


__all__ = ["Explorer", "MAX_CUTS", "TOP", "TextState", "head_name", "in_range"]
