"""Circuits across streams on Whisper tiny.en: edges from the encoder's heads and MLPs into the decoder's
cross-attention keys and values, estimated, path-patched exactly and cut as for text — one pair of clips
(paris / rome) being the prompt set."""

import json

import pytest
import torch

import attnroute as ar
from attnroute.audio import audio
from attnroute.cli import main
from attnroute.read.ground.speech import clip_pair

pytestmark = pytest.mark.slow
ENCODER_SENDERS = 1 + 4 * (6 + 1)  # the encoder's start, then each block's 6 heads and its MLP
CROSS_KV_RECEIVERS = 4 * 6 * 2  # each decoder block's 6 kv heads, keys and values


def test_a_circuit_between_two_clips_crosses_streams(tmp_path, capsys):
    out, png, csv = tmp_path / "c.json", tmp_path / "c.png", tmp_path / "c.csv"
    # EAP alone (--ig-steps 1): EAP-IG's interpolation is tested on text (tests/read/test_circuits.py); here, on a
    # 1,500-frame encoder, its five steps were a quarter of CI's longest test
    argv = ["circuit", "--audio-clean", "paris", "--audio-corrupt", "rome", "--exact", "6", "--ig-steps", "1"]
    argv += ["--edges", "E3.H0>L3.xKV3.v", "--json", str(out), "--plot", str(png), "--csv", str(csv)]
    assert main(argv) == 0  # no --model: a clip pair reads whisper-tiny
    said = capsys.readouterr()
    assert "[2]'␣The'" in said.out + said.err  # the tokens both runs read, as a prompt's are shown
    r = json.loads(out.read_text())
    m = r["meta"]
    assert m["streams"] == ["encoder", "decoder"] and m["stream_layers"] == {"encoder": 4, "decoder": 4}
    said = m["prompts"][0]
    assert said["clips"]["clean"].startswith("paris") and said["prefix"] == "The capital of France is"
    assert (said["answer"], said["wrong"]) == (" Paris", " Rome")
    crossing = [e for e in r["edges"] if e["sender"]["stream"] == "encoder" and e["receiver"]["attention"] == "cross"]
    assert len(crossing) == ENCODER_SENDERS * CROSS_KV_RECEIVERS
    asked = next(e for e in r["edges"] if e["label"] == "E3.H0>L3.xKV3.v")
    assert asked["exact"] is not None and asked["receiver"]["channel"] == "v"
    # the edges are exact where it counts: every edge clean gives the clean run, none gives the corrupt one
    checks = r["circuit"]["checks"]
    assert checks["full"]["max_abs_diff"] < 1e-3 and checks["empty"]["max_abs_diff"] < 1e-3
    assert m["m_clean"] > 10 and m["m_corrupt"] < -10
    # the QK fix is affordable on the decoder's few tokens, not on the encoder's 1,500 frames (one budget per stream)
    assert "QK fix" in m["estimate"] and "L0, L1, L2, L3" in m["estimate"] and "E0" not in m["estimate"]
    top = sorted((e for e in r["edges"] if e["exact"] is not None), key=lambda e: -abs(e["exact"]))[:10]
    assert sum(e["label"].startswith("L3.xH") and e["label"].endswith(">logits") for e in top) >= 3
    assert png.read_bytes()[:4] == b"\x89PNG" and "E3.H0>L3.xKV3.v" in csv.read_text()


def _hand_patched(whisper, kv_head: int) -> float:
    """E3.MLP → decoder block 3's cross-attention values of kv head ``kv_head``, path-patched with plain hooks
    on the transformers model: the rome run, whose one kv head's values read the encoder's final residual plus
    the change of the encoder's last MLP write (paris − rome), through the encoder's final norm."""
    pair = clip_pair(whisper, audio("paris"), audio("rome"))
    model, (fa, fb) = whisper.model.model, pair.features
    enc, cross = model.encoder, model.decoder.layers[3].encoder_attn
    seen = {}

    def keep(name):
        return lambda mod, args, out: seen.__setitem__(name, out[0] if isinstance(out, tuple) else out)

    hooks = [enc.layers[3].fc2.register_forward_hook(keep("mlp")), enc.layers[3].register_forward_hook(keep("x"))]
    with torch.no_grad():
        enc(input_features=fa)
        mlp_clean = seen["mlp"]
        encoded = enc(input_features=fb)  # the rome run's encoding: the decoder runs below read it (1.3 s an encoder)
    for h in hooks:
        h.remove()
    moved = cross.v_proj(enc.layer_norm(seen["x"] + mlp_clean - seen["mlp"])).detach()
    d = cross.head_dim
    cols = slice(kv_head * d, (kv_head + 1) * d)

    def patch(mod, args, out):
        out = out.clone()
        out[..., cols] = moved[..., cols]
        return out

    def metric(hook: bool) -> float:
        handle = cross.v_proj.register_forward_hook(patch) if hook else None
        with torch.no_grad():
            logits = whisper.model(encoder_outputs=encoded, decoder_input_ids=pair.ids, use_cache=False).logits[0, -1]
        if handle:
            handle.remove()
        return float(logits[pair.answer] - logits[pair.wrong])

    return metric(True) - metric(False)


def test_path_patching_an_encoder_edge_into_cross_values_is_the_hand_computed_one(whisper, encoder_runs, monkeypatch):
    clips = {"audio_clean": "paris", "audio_corrupt": "rome"}
    r = ar.path_patch(whisper, **clips, sender="E3.MLP", receiver="L3.xKV4", channel="v")
    # the transcripts, the layout's discovery, the two recorded runs and the estimate's gradient pass: the patch
    # itself is in the decoder, which reads the rome run's encoding (and its final residual) as recorded
    assert len(encoder_runs) == 5
    monkeypatch.undo()  # the hooks reference below runs the encoder uncounted
    e = r.to_dict()["edge"]
    assert e["label"] == "E3.MLP>L3.xKV4.v"
    hand = _hand_patched(whisper, 4)
    assert abs(hand) > 0.5  # measured +2.0: a real effect, not two zeros agreeing
    assert e["exact"] == pytest.approx(hand, abs=2e-3)


def test_composition_reads_the_decoder_of_a_speech_model(whisper):
    scores = ar.composition(whisper).to_dict()
    assert scores["meta"]["stream"] == "decoder" and scores["meta"]["layers"] == 4


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--prompts", "ioi"], "not both"),
        (["--metric", "loss"], "use logit-diff, prob, logprob or kl"),
        (["--checkpoint", "x.npz"], "leave it out"),
        (["--ablation", "mean"], "use ablation corrupt"),
        (["--text", "The capital of France is"], "give --answer and --wrong too"),
    ],
)
def test_clip_circuits_refuse_what_a_clip_pair_cannot_mean(extra, words, capsys):
    assert main(["circuit", "--audio-clean", "paris", "--audio-corrupt", "rome", *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_one_clip_alone_or_a_text_model_is_refused(capsys):
    assert main(["circuit", "--audio-clean", "paris"]) == 2
    assert "--audio-clean needs --audio-corrupt" in capsys.readouterr().err.replace("`", "")
    assert main(["circuit", "--model", "smollm2", "--audio-clean", "paris", "--audio-corrupt", "rome"]) == 2
    assert "no audio encoder" in capsys.readouterr().err


def test_why_a_cross_head_hears_a_word_splits_across_both_streams(tmp_path):
    """`why --audio rome --head L3.xH3 --query Rome --key Rome`: the row that predicts " Rome" → the 22 frames
    the alignment gives " Rome"; the score is the sum of its (decoder component, encoder component) pairs."""
    out = tmp_path / "w.json"
    argv = ["why", "--audio", "rome", "--head", "L3.xH3", "--query", "Rome", "--key", "Rome", "--json", str(out)]
    assert main(argv) == 0  # no --model: a clip reads whisper-tiny
    r = json.loads(out.read_text())
    assert r["meta"]["routes"] == 22 and abs(r["difference"]) < 1e-4 * max(1.0, abs(r["score"]))
    assert r["meta"]["tokens"][7] == " Rome" and "rows [6]" in r["meta"]["said"] and "frames 75" in r["meta"]["said"]
    streams = {side: {t["component"].get("stream") for t in r["totals"][side]} for side in ("query_side", "key_side")}
    assert streams["query_side"] <= {"decoder", None} and streams["key_side"] <= {"encoder", None}  # None: biases
    assert sum(t["total"] for t in r["totals"]["key_side"]) == pytest.approx(r["sum"], abs=1e-3)


def test_why_an_encoder_head_reads_frames_by_seconds_or_index(whisper):
    r = ar.why(whisper, audio="rome", head="E2.H0", query="1.5-1.6", key="0,1").to_dict()
    assert r["meta"]["routes"] == 5 * 2 and abs(r["difference"]) < 1e-4 * max(1.0, abs(r["score"]))
    with pytest.raises(ar.InputError, match="not a word of the transcript"):
        ar.why(whisper, audio="rome", head="L3.xH3", query="Londres", key="Rome")


def test_a_route_the_decoders_causal_mask_forbids_is_refused_as_on_a_text_model(whisper):
    """The decoder row that predicts 'Paris' reading Paris's own token is a future key: Whisper's decoder
    self-attention has no such route, so its score is not split (it was, +2.35, while text models refused)."""
    with pytest.raises(ar.InputError) as e:
        ar.why(whisper, audio="paris", head="L3.H3", query="Paris", key="Paris")
    assert e.value.field == "key" and "mask forbids" in str(e.value) and "\n" not in str(e.value)
    kept = ar.why(whisper, audio="paris", head="L3.H3", query="Paris", key="0,1,2,3,4,5,6,7").to_dict()
    assert "masked in this head (no score) left out" in kept["meta"]["said"]  # the future keys dropped, said
