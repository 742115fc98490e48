"""The explorer on a speech model: `attnroute serve --model whisper-tiny --audio YOUR.wav` in its own
process; in a real browser, a clip's cross-attention heads (the alignment heads marked) and one head's map
(tokens × time), a click on the map cutting a row's routes to the word heard there — the numbers those of
attnroute.cross_knockout; through the API, requests that name what a speech server does not serve refused."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

import attnroute as ar
from attnroute.audio import AUDIO_DIR
from attnroute.cli import main

from .conftest import start
from .test_browser import browser_page, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def speech_server(tmp_path_factory):
    mine = tmp_path_factory.mktemp("clips") / "mine.wav"  # a user's clip: the page offers it by its name
    shutil.copy(AUDIO_DIR / "rome.wav", mine)
    server = start("--model", "whisper-tiny", "--audio", str(mine), "--queue", "4")
    yield server
    assert server.stop() == 0, "\n".join(server.lines[-20:])


@pytest.fixture(scope="module")
def client(speech_server):
    with httpx.Client(base_url=speech_server.base, headers=speech_server.headers(), timeout=120) as c:
        yield c


CLICK = """() => { const cv = document.getElementById('cross-map'), r = cv.getBoundingClientRect();
  const F = CLIP.maps[3][0].T, px = Math.max(1, Math.min(8, Math.floor(900 / F)));
  const row = CLIP.tokens.indexOf(' Rome'), w = CLIP.words.find(x => x.word.startsWith('Rome'));
  const frame = Math.floor((w.start + w.end) / 2 / CLIP.frame_seconds);
  return {x: (100 + frame * px + px / 2) * r.width / cv.width, y: (18 + row * 16 + 8) * r.height / cv.height}; }"""


def test_a_click_on_a_cross_map_cuts_the_words_routes(speech_server, whisper):
    with browser_page(speech_server.url) as (page, events):
        page.wait_for_selector("body[data-ready='idle']", state="attached")
        assert page.locator("#text-mode").is_hidden() and page.locator("#speech-mode").is_visible()
        assert "mine" in page.locator("#clip option").all_text_contents()
        page.select_option("#clip", "mine")  # the user's own clip, named by its file
        page.click("#run-clip")
        page.wait_for_selector("body[data-clip='1']", state="attached", timeout=60_000)
        assert page.locator("#cross-grid rect.cross-head").count() == 4 * 6
        outlined = page.locator("#cross-grid rect.cross-head[stroke='#d62728']").count()
        assert outlined == 8 - 1  # the model's 8 alignment heads, less the one selected (outlined in black)
        assert page.evaluate("document.getElementById('spectrogram').src").startswith("data:image/png;base64,")
        assert page.evaluate("CLIP.transcript") == "The capital of France is Rome."
        page.locator("#cross-grid rect[data-layer='3'][data-head='0']").click()
        assert "L3.H0" in page.text_content("#cross-title")
        at = page.evaluate(CLICK)
        page.locator("#cross-map").click(position=at, modifiers=["Shift"])  # every head of cross layer 3
        wait_until(page, "document.body.dataset.clipcut === '1'", timeout=60)
        said = page.text_content("#clip-cuts")
        assert "every head of cross layer 3" in said and "Rome" in said
        row = page.evaluate("CLIP.tokens.indexOf(' Rome')")
        delta = float(page.locator("#clip-rows tr").nth(row + 1).locator("td.delta").text_content())
        assert "after the cuts" in page.text_content("#clip-transcripts")
        assert page.evaluate("document.getElementById('error').textContent") == ""
    ko = ar.cross_knockout(whisper, "rome", source="Rome", target="word", window=1).to_dict()
    assert delta == pytest.approx(ko["windows"][-1]["delta_logprob_route"], abs=2e-3)  # −0.56: the same cut
    assert events["errors"] == []
    assert all(u.startswith(speech_server.base + "/") or u.startswith(("blob:", "data:")) for u in events["requests"])


def test_the_api_serves_clips_by_name_only(client):
    r = client.post("/api/text", json={"text": "hello"})
    assert r.status_code == 400 and "a speech model's clips" in r.json()["error"]
    for name in ("../../etc/passwd", "/etc/passwd", "nothere"):
        r = client.post("/api/clip", json={"clip": name})
        assert r.status_code == 400 and "no clip named" in r.json()["error"]
    ok = client.post("/api/clip", json={"clip": "paris", "text": "The capital of France is Paris."})
    assert ok.status_code == 200 and ok.json()["transcript_source"] == "given (teacher-forced)"
    bad = [
        {"kind": "routes", "layer": 3, "head": 0, "row": 99, "start": 1.5, "end": 1.9},
        {"kind": "routes", "layer": 9, "head": 0, "row": 0, "start": 1.5, "end": 1.9},
        {"kind": "routes", "layer": 3, "head": True, "row": 0, "start": 1.5, "end": 1.9},
        {"kind": "routes", "layer": 3, "head": 0, "row": 0, "start": 1.9, "end": 1.5},
        {"kind": "routes", "layer": 3, "head": 0, "row": 0, "start": 0.1, "end": float("inf")},
        {"kind": "routes", "layer": 3, "head": 0, "row": 0, "start": "0.1", "end": 1.0},
        {"kind": "everything"},
    ]
    for cut in bad:  # an infinite end travels as JSON's Infinity, which the server's parser reads as inf
        body = json.dumps({"clip": "paris", "cuts": [cut]})  # allow_nan: inf is written Infinity
        r = client.post("/api/clipcut", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "cut 0" in r.json()["error"], cut
    assert client.get("/health").json()["status"] == "ok"  # and it keeps serving


def test_audio_clips_are_checked_before_the_weights_load(tmp_path, capsys, no_model_load):
    assert main(["serve", "--model", "whisper-tiny", "--audio", str(tmp_path / "none.wav")]) == 2
    assert "no audio file" in capsys.readouterr().err
    (tmp_path / "paris.wav").write_bytes((AUDIO_DIR / "paris.wav").read_bytes())
    assert main(["serve", "--model", "whisper-tiny", "--audio", str(tmp_path / "paris.wav")]) == 2
    assert "rename one of the files" in capsys.readouterr().err
    shutil.copy(AUDIO_DIR / "paris.wav", tmp_path / "other.wav")
    assert main(["serve", "--model", "smollm2", "--audio", str(tmp_path / "other.wav")]) == 2
    assert "need a speech model" in capsys.readouterr().err


def test_a_cut_runs_the_decoder_alone_on_the_clips_encoding_and_changes_no_number(whisper):
    """A cut is in a cross layer, so the encoder's output is the clip's own: the explorer encodes a clip once
    (with its state) and a cut's log-probabilities and its decoding run the decoder alone. Its numbers are
    those of the whole model rerun with the cut, bit for bit (each click ran the 1,500-frame encoder twice)."""
    import torch

    from attnroute.read.adapter import routed
    from attnroute.serve.speech import SpeechExplorer
    from attnroute.serve.worker import Job

    ex, said = SpeechExplorer(whisper), "The capital of France is Rome."
    st = ex.state("rome", said, Job())
    row = st.page["tokens"].index(" Rome")
    cuts = [{"kind": "routes", "layer": 3, "head": None, "row": row, "start": 0, "end": st.clip.frames}]
    runs = []
    hook = whisper.model.model.encoder.register_forward_hook(lambda *a: runs.append(1))
    try:
        got = ex.clip_cut("rome", said, cuts, Job())
    finally:
        hook.remove()
    assert runs == [] and got["delta"][row] < -0.1  # no encoder run, and the cut moved the word's row
    made = ex.interventions(cuts, st)
    with torch.no_grad(), routed(whisper, interventions=made, impl="eager"):  # the whole model, encoder and all
        logits = whisper.model(**st.batch).logits[0].float()
    ids = st.batch["decoder_input_ids"][0, st.P :, None]
    want = torch.log_softmax(logits[st.P - 1 : -1], -1).gather(1, ids)[:, 0].double().numpy()
    assert (ex._logprobs(st.batch, st.P, made, st.encoding) == want).all()


def test_a_whisper_directory_is_not_refused_as_a_text_encoder_decoder(tmp_path, capsys):
    """serve's check before the load took every encoder–decoder's facts for a text one: a Whisper saved as a
    directory was refused with "for a text encoder-decoder use report". Its facts now say it hears audio, so the
    check lets it through to the load (where this random one's tokenizer, without Whisper's prompt tokens, is
    refused by name); a T5 directory is still refused before the load (tests/serve/test_hostile.py)."""
    from attnroute.models import facts_of
    from tests.read.zoo import build

    whisper_dir = build("whisper", tmp_path)
    assert facts_of(str(whisper_dir)).audio is True and facts_of(str(build("t5", tmp_path))).audio is False
    assert main(["serve", "--model", str(whisper_dir), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "text encoder-decoder" not in err and "<|startoftranscript|>" in err
