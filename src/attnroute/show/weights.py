"""Attention weights as bytes a page can carry: 8-bit codes on a log scale, one per kept key.

    code 0        weight below FLOOR (1e-6) or exactly 0: dropped, and the dropped mass is measured
    code c ≥ 1    weight = FLOOR ** ((255 - c) / 254)      (c = 255 is weight 1)

A linear 8-bit code (weight·255) rounds every weight under 1/510 to zero: on a 512-token row of a
diffuse head that is most of the row. The log code keeps every weight from 1e-6 to 1 with a relative
error of at most ±2.8 % (half a step of ln(1e6)/254), so a row's dropped mass is at most T·1e-6.

Layout per layer: heads one after another, rows one after another; a causal self-attention layer
(every weight above the diagonal exactly 0, checked, not assumed) keeps row i's keys 0 … i only
(the lower triangle: T(T+1)/2 codes a head instead of T²). The page's blob is zlib-compressed and
base64-encoded; components.js inflates it with the browser's DecompressionStream("deflate").
"""

from __future__ import annotations

import base64
import zlib

import numpy as np

FLOOR = 1e-6
_LOG_FLOOR = float(np.log(FLOOR))
STEPS = 254


def encode(w: np.ndarray) -> np.ndarray:
    """uint8 codes of weights in [0, 1], any shape (code 0: below FLOOR)."""
    w = np.asarray(w, dtype=np.float64)
    with np.errstate(divide="ignore"):
        c = np.rint(255 - STEPS * np.log(np.maximum(w, 1e-300)) / _LOG_FLOOR)
    return np.where(c >= 1, np.minimum(c, 255), 0).astype(np.uint8)


def decode(codes: np.ndarray) -> np.ndarray:
    """Weights from codes (float32): the inverse of ``encode`` up to its ±2.8 %."""
    c = np.asarray(codes, dtype=np.float64)
    return np.where(c > 0, np.exp(_LOG_FLOOR * (255 - c) / STEPS), 0.0).astype(np.float32)


def is_lower_triangular(w: np.ndarray) -> bool:
    """[H, T, T]: no query takes weight from a later key (every entry above the diagonal is exactly 0)."""
    T = w.shape[-1]
    return w.shape[-2] == T and not np.triu(w, 1).any()


def layer_codes(w: np.ndarray, triangle: bool) -> bytes:
    """One layer's [H, T, T] weights as codes: whole rows, or rows 0 … i of the lower triangle."""
    codes = encode(w)
    if not triangle:
        return codes.tobytes()
    rows, cols = np.tril_indices(w.shape[-1])
    return codes[:, rows, cols].tobytes()  # (H, T(T+1)/2), row-major within the triangle


def dropped_mass(w: np.ndarray) -> np.ndarray:
    """The weight of each row that the code drops (weights under FLOOR): [H, T]."""
    return np.where(encode(w) == 0, w, 0).sum(-1)


def blob(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 6)).decode()


def pack_log8(weights: list[np.ndarray]) -> dict:
    """Every layer's weights, every key kept (to FLOOR): the page's "log8" format."""
    triangles = [is_lower_triangular(w) for w in weights]
    dropped = np.stack([dropped_mass(w) for w in weights]) if weights else np.zeros(1)
    return {
        "format": "log8",
        "T": int(weights[0].shape[-1]),
        "Tq": int(weights[0].shape[-2]),
        "floor": FLOOR,
        "steps": STEPS,
        "triangle": triangles,
        "layers": [blob(layer_codes(w, t)) for w, t in zip(weights, triangles)],
        "dropped_mean": float(dropped.mean()),
        "dropped_max": float(dropped.max()),
    }


def log8_bytes(weights: list[np.ndarray]) -> int:
    """The codes' size before compression (what the budget bounds)."""
    total = 0
    for w in weights:
        H, Tq, T = w.shape
        total += H * (T * (T + 1) // 2 if is_lower_triangular(w) else Tq * T)
    return total


def pack_topk(weights: list[np.ndarray], k: int) -> dict:
    """Each row's top ``k`` keys, log8-coded, with their indices (2 bytes): for texts past the budget.
    The dropped mass (what the other keys held) is measured and stated on the page."""
    H, Tq, T = weights[0].shape
    blobs, dropped = [], []
    for w in weights:
        idx = np.argsort(-w, axis=-1)[..., :k]  # (H, Tq, k)
        val = np.take_along_axis(w, idx, -1)
        dropped.append(1 - val.sum(-1))
        rec = np.concatenate([idx.astype("<u2").view(np.uint8).reshape(H, Tq, k, 2), encode(val)[..., None]], -1)
        blobs.append(blob(rec.tobytes()))
    d = np.clip(np.stack(dropped), 0, 1)
    return {
        "format": "topk",
        "T": int(T),
        "Tq": int(Tq),
        "k": int(k),
        "floor": FLOOR,
        "steps": STEPS,
        "layers": blobs,
        "dropped_mean": float(d.mean()),
        "dropped_max": float(d.max()),
    }


def head_payload(w: np.ndarray) -> dict:
    """One head's [Tq, T] weights for the explorer (fetched lazily per head): log8 codes, base64, no zlib
    (the server's responses are small enough; the page decodes them synchronously)."""
    w = np.asarray(w, dtype=np.float32)
    return {
        "Tq": int(w.shape[0]),
        "T": int(w.shape[1]),
        "codes": base64.b64encode(encode(w).tobytes()).decode(),
        "dropped_max": float(dropped_mass(w[None])[0].max()) if w.size else 0.0,
    }


__all__ = [
    "FLOOR",
    "decode",
    "dropped_mass",
    "encode",
    "head_payload",
    "is_lower_triangular",
    "log8_bytes",
    "pack_log8",
    "pack_topk",
]
