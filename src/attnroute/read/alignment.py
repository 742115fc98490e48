"""Which cross-attention heads of a speech model follow the audio: each head's routes from the transcript's
tokens to the encoder's frames, scored against word times the heads agree on, ranked, and set beside the
alignment heads the model's publisher lists (Whisper's ``alignment_heads``).

    found = alignment(loaded, batch, clip)     # meta["alignment"] of `heads --audio`
    found["ranking"]                           # [[cross layer, head], …] best first
    found["overlap"]                           # the top len(reference) against the reference

Per cross-attention head, over the transcript's tokens (prompt and <|endoftext|> left out) and the clip's
frames (20 ms each; the padding's silence left out):

- ``monotonicity``: Spearman's ρ between a token's index and its argmax frame — a head that follows the
  speech reads later frames for later tokens (1: perfectly in order);
- ``agreement``: the share of tokens whose argmax frame lies within ``TOLERANCE`` frames of the span the
  consensus alignment gives that token.

The consensus is OpenAI's recipe (whisper/timing.py, ``find_alignment``) over *every* cross-attention
head rather than over a list chosen beforehand: each head's weights standardized per frame across the
tokens (a frame every token reads — a sink — cancels), a median filter of width 7 along the frames, the
mean over heads, then dynamic time warping of the tokens onto the frames. Ranking: agreement, then
monotonicity. The same DTW over the reference heads alone gives the reference's word times, and the
mean distance between the two sets of word times is reported: two independent readings of when each word
is spoken.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from ..audio import FRAME_SECONDS
from ..engine import CallbackProbe, InputError
from .adapter import routed
from .ground.speech import prompt_length

TOLERANCE = 5  # frames (100 ms): a word's edge is not sharper than a syllable
MEDIAN = 7  # OpenAI's medfilt_width
SECONDS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*-\s*(\d+(?:\.\d+)?)\s*s?\s*$")


class SpanError(InputError):
    """A word or span of a clip that is not there: the message names it."""


def word_positions(loaded, text: str, word: str, P: int) -> list[int]:
    """Decoder positions of the tokens of ``word`` (every occurrence, whole words) in prompt + text."""
    spans = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(word.strip())}(?!\w)", " " + text.strip())]
    if not spans:
        raise SpanError(f"{word!r} is not a word of the transcript {text.strip()!r}", field="source")
    enc = loaded.tokenizer(" " + text.strip(), return_offsets_mapping=True, add_special_tokens=False)
    return [P + i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and any(a < e and s < b for s, e in spans)]


def frame_span(spec: str, words: list[dict], source: str, frames: int) -> tuple[int, int, str]:
    """[first, last) frames of the target: 'word' (the source's own), another word, or seconds 'a-b'."""
    if (m := SECONDS.match(spec)) is not None:
        a, b = int(float(m.group(1)) / FRAME_SECONDS), int(np.ceil(float(m.group(2)) / FRAME_SECONDS))
        how = f"{m.group(1)}–{m.group(2)} s"
    else:
        name = source if spec == "word" else spec
        hits = [w for w in words if w["word"].strip(".,!?;:").lower() == name.strip().lower()]
        if not hits:
            raise SpanError(f"{name!r} is not a word of the alignment ({[w['word'] for w in words]})", field="target")
        a, b = int(hits[0]["start"] / FRAME_SECONDS), int(np.ceil(hits[0]["end"] / FRAME_SECONDS))
        how = f"the frames of {name!r} by the alignment's word times ({hits[0]['start']}–{hits[0]['end']} s)"
    if not 0 <= a < b <= frames:
        raise SpanError(f"the span {spec!r} ({a}–{b} frames) is not inside the clip's {frames} frames", field="target")
    return a, b, how


def cross_weights(loaded, batch: dict, clip) -> tuple[np.ndarray, list[int]]:
    """[cross layers, H, text tokens + 1, clip frames] weights, and the cross layers' indices among all layers.
    Row i is the row that *predicts* text token i (the row before it: <|notimestamps|>'s predicts the
    first); the last row predicts <|endoftext|> and closes the last word (OpenAI's timing.py slices the
    same rows: ``matrix[len(sot_sequence) : -1]`` of a sequence holding <|notimestamps|>). The eager
    backend's weights, kept for the cross layers only (an encoder layer's are 6 × 1,500² floats)."""
    layers = [i for i, k in enumerate(loaded.attention_kinds) if k == "cross"]
    one = {k: v[:1] for k, v in batch.items()}
    ids = one["decoder_input_ids"]
    P, T = prompt_length(loaded, ids), ids.shape[1]
    kept: dict[int, np.ndarray] = {}

    def keep(block):
        if block.layer in layers:
            kept[block.layer] = block.weights[0, :, P - 1 : T - 1, : clip.frames].float().numpy()

    with torch.no_grad(), routed(loaded, probes=[CallbackProbe(keep)], impl="eager"):
        loaded.model(**one)
    return np.stack([kept[i] for i in layers]), layers


def consensus(weights: np.ndarray) -> np.ndarray:
    """[tokens, frames]: per head standardized across tokens, median-filtered along frames, averaged."""
    from scipy.ndimage import median_filter

    w = weights.reshape(-1, *weights.shape[-2:])  # (heads, N, F)
    z = (w - w.mean(-2, keepdims=True)) / (w.std(-2, keepdims=True) + 1e-8)
    z = median_filter(z, size=(1, 1, MEDIAN), mode="nearest")
    return z.mean(0)


def dtw(cost: np.ndarray) -> np.ndarray:
    """The monotone path through ``cost`` [N, F] from (0, 0) to (N−1, F−1) with steps (1,1), (1,0), (0,1):
    (token, frame) pairs in order (OpenAI's dtw_cpu)."""
    N, F = cost.shape
    acc = np.full((N + 1, F + 1), np.inf)
    acc[0, 0] = 0
    step = np.zeros((N + 1, F + 1), np.int8)
    for i in range(1, N + 1):
        for j in range(1, F + 1):
            options = (acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1])
            k = int(np.argmin(options))
            acc[i, j], step[i, j] = cost[i - 1, j - 1] + options[k], k
    i, j, path = N, F, []
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        k = step[i, j]
        i, j = (i - 1, j - 1) if k == 0 else (i - 1, j) if k == 1 else (i, j - 1)
    return np.array(path[::-1])


def token_spans(path: np.ndarray, n: int) -> np.ndarray:
    """[n, 2] first and last frame of each of the n text tokens: token i runs from the frame where the path
    reaches row i to the frame before it reaches row i + 1 (row n: the <|endoftext|> predictor)."""
    first = np.array([path[path[:, 0] == t, 1].min() if (path[:, 0] == t).any() else 0 for t in range(n + 1)])
    return np.stack([first[:-1], np.maximum(first[:-1], first[1:] - 1)], 1)


def words(tokens: list[str], spans: np.ndarray) -> list[dict]:
    """Words (a token starting with a space opens one) with start and end in seconds."""
    out: list[dict] = []
    for tok, (a, b) in zip(tokens, spans):
        if not out or tok.startswith(" "):
            out.append(
                {
                    "word": tok.strip(),
                    "start": round(float(a) * FRAME_SECONDS, 3),
                    "end": round(float(b + 1) * FRAME_SECONDS, 3),
                }
            )
        else:
            out[-1]["word"] += tok
            out[-1]["end"] = round(float(b + 1) * FRAME_SECONDS, 3)
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """scipy's Spearman ρ (tied argmax frames share their rank); 0 for a head whose argmax never moves."""
    from scipy.stats import spearmanr

    if len(x) < 3 or np.all(y == y[0]):
        return 0.0
    return float(spearmanr(x, y).statistic)


def head_scores(weights: np.ndarray, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(monotonicity, agreement), each [cross layers, H]."""
    Lc, H, _, _ = weights.shape
    N = len(spans)
    arg = weights[:, :, :N].argmax(-1)  # (Lc, H, N): the rows that predict the text tokens
    order = np.arange(N)
    mono = np.array([[spearman(order, arg[l, h]) for h in range(H)] for l in range(Lc)])
    inside = (arg >= spans[:, 0] - TOLERANCE) & (arg <= spans[:, 1] + TOLERANCE)
    return mono, inside.mean(-1)


def alignment(loaded, batch: dict, clip, weights: tuple | None = None) -> dict:
    """meta["alignment"]: the ranking, the reference and their overlap, per-head scores, word times.
    ``weights``: cross_weights(loaded, batch, clip) when the caller holds them already (one forward less)."""
    weights, layers = weights if weights is not None else cross_weights(loaded, batch, clip)  # (Lc, H, N, F)
    ids = batch["decoder_input_ids"][0]
    P = prompt_length(loaded, ids[None])
    toks = [loaded.tokenizer.decode([int(t)]) for t in ids[P:-1]]
    spans = token_spans(dtw(-consensus(weights)), len(toks))
    mono, agree = head_scores(weights, spans)
    Lc, H = mono.shape
    order = sorted(((l, h) for l in range(Lc) for h in range(H)), key=lambda lh: (-agree[lh], -mono[lh]))
    reference = [list(map(int, r)) for r in getattr(loaded.model.config, "alignment_heads", None) or []]
    out = {
        "ranking": [[int(l), int(h)] for l, h in order],
        "reference": reference,
        "layers": "cross-attention layers counted from 0 (decoder layer i's cross-attention), as the reference does",
        "monotonicity": np.round(mono, 4).tolist(),
        "agreement": np.round(agree, 4).tolist(),
        "tolerance_frames": TOLERANCE,
        "words": words(toks, spans),
        "method": "DTW over the standardized, median-filtered mean of every cross-attention head (OpenAI's "
        "find_alignment recipe); per head: Spearman ρ of token index vs argmax frame, and the share of tokens "
        f"whose argmax frame is within {TOLERANCE} frames ({TOLERANCE * FRAME_SECONDS * 1000:.0f} ms) of its span",
        "cross_layers": layers,
    }
    if reference:
        out.update(_against_reference(weights, reference, order, toks, out["words"]))
    return out


def _against_reference(weights, reference: list, order: list, toks: list, ours: list) -> dict:
    k = len(reference)
    top = {tuple(x) for x in order[:k]}
    shared = sorted(top & {tuple(r) for r in reference})
    ref_w = np.stack([weights[l, h] for l, h in reference])[None]
    ref_words = words(toks, token_spans(dtw(-consensus(ref_w)), len(toks)))
    starts = np.array([w["start"] for w in ref_words])
    gap = [abs(a["start"] - b["start"]) for a, b in zip(ours, ref_words)]
    return {
        "overlap": {
            "k": k,
            "shared": len(shared),
            "heads": [list(map(int, s)) for s in shared],
            "share": len(shared) / k,
        },
        "reference_words": ref_words,
        "reference_words_increasing": bool(np.all(np.diff(starts) >= 0)),
        "word_start_gap_s": round(float(np.mean(gap)), 3) if gap else None,
    }


def cross_columns(loaded, found: dict) -> dict[str, np.ndarray]:
    """The per-head scores as [L, H] columns of a HeadTable (NaN outside cross-attention)."""
    L, H = loaded.n_layers, loaded.n_heads
    cols = {"alignment": np.full((L, H), np.nan), "monotonicity": np.full((L, H), np.nan)}
    for i, layer in enumerate(found["cross_layers"]):
        cols["alignment"][layer] = found["agreement"][i]
        cols["monotonicity"][layer] = found["monotonicity"][i]
    return cols


__all__ = [
    "SpanError",
    "alignment",
    "consensus",
    "cross_columns",
    "dtw",
    "frame_span",
    "head_scores",
    "word_positions",
    "words",
]
