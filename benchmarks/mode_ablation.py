"""Ablation per attention mode on Whisper tiny.en, scored by word error rate on the eight committed
espeak-ng clips (73 words): every head's exact Δ loss, then per mode (encoder self, decoder self, cross)
the heads pruned least important first, and each mode's last layer cut to one head (Michel et al. 2019).
Also the alignment-head ranking over all eight clips against OpenAI's list.

    .venv/bin/python benchmarks/mode_ablation.py     # ~10 minutes on 2 cores -> benchmarks/results/mode-ablation.json
    .venv/bin/python benchmarks/mode_ablation.py --alignment-only   # the alignment part again (seconds)
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from attnroute.audio import audio, bundled_clips
from attnroute.models import load
from attnroute.read.alignment import alignment
from attnroute.read.ground.speech import decoder_ids, speech_batch
from attnroute.read.mode_ablation import ablate_modes

OUT = Path(__file__).parent / "results" / "mode-ablation.json"


def alignment_over_clips(loaded) -> dict:
    """Each cross-attention head's agreement averaged over the clips, ranked, against the reference."""
    agree, mono, per_clip = [], [], []
    for name in bundled_clips():
        clip = audio(name)
        found = alignment(loaded, speech_batch(clip.features(), decoder_ids(loaded, clip.text)), clip)
        agree.append(found["agreement"])
        mono.append(found["monotonicity"])
        per_clip.append(
            {"clip": name, "shared": found["overlap"]["shared"], "word_start_gap_s": found["word_start_gap_s"]}
        )
    a, m = np.mean(agree, 0), np.mean(mono, 0)
    Lc, H = a.shape
    order = sorted(((l, h) for l in range(Lc) for h in range(H)), key=lambda lh: (-a[lh], -m[lh]))
    ref = {tuple(r) for r in loaded.model.config.alignment_heads}
    top = order[: len(ref)]
    return {
        "ranking": [list(x) for x in order],
        "reference": sorted(list(r) for r in ref),
        "shared_in_top_k": len(ref & set(top)),
        "k": len(ref),
        "mean_agreement": np.round(a, 3).tolist(),
        "per_clip": per_clip,
    }


def main() -> None:
    loaded = load("whisper-tiny")
    if "--alignment-only" in sys.argv:
        result = json.loads(OUT.read_text())
        result["alignment"] = alignment_over_clips(loaded)
        OUT.write_text(json.dumps(result, indent=1))
        print("alignment over clips:", result["alignment"]["shared_in_top_k"], "/", result["alignment"]["k"])
        return
    t0 = time.perf_counter()
    result = ablate_modes(loaded, progress=None)
    result["alignment"] = alignment_over_clips(loaded)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    OUT.write_text(json.dumps(result, indent=1))
    for mode, curve in result["curves"].items():
        print(
            mode,
            [(p["pruned"], p["wer"]) for p in curve],
            "last layer → one head:",
            result["last_layer_one_head"][mode]["wer"],
        )
    print("alignment over clips:", result["alignment"]["shared_in_top_k"], "/", result["alignment"]["k"])


if __name__ == "__main__":
    main()
