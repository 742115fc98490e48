"""Audio input for a speech model (Whisper): a WAV file read, mixed to mono, resampled to 16 kHz, and turned
into the log-mel features Whisper's encoder reads (transformers' WhisperFeatureExtractor, so the features
are the model's own, not a reimplementation).

    clip = audio("speech.wav")        # or a bundled clip by name: "paris", "fox", … (data/audio/)
    clip.samples                      # float32 [N] at 16 kHz, in [−1, 1]
    clip.features(80)                 # torch [1, 80, 3000]: 30 s of frames, the clip padded with silence

Only uncompressed PCM WAV (8/16/24/32-bit integer) is read — Python's own ``wave`` module, no new
dependency; resampling is scipy's polyphase filter (``resample_poly``, an anti-aliasing FIR). Refused in one
line each: another format, an empty clip, one longer than Whisper's 30-second window, a sample rate
outside 8–192 kHz.
"""

from __future__ import annotations

import json
import math
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import InputError

RATE = 16_000  # Whisper's sample rate
MAX_SECONDS = 30.0  # Whisper's window: 3,000 mel frames, 1,500 encoder positions (20 ms each)
RATES = (8_000, 192_000)
AUDIO_DIR = Path(__file__).parent / "data" / "audio"
FRAME_SECONDS = 0.02  # one encoder position (two 10 ms mel frames, halved by the stride-2 conv)


class AudioError(InputError):
    def __init__(self, message: str):
        super().__init__(message, field="audio")


@dataclass
class Audio:
    source: str  # the file (or bundled name) it came from
    samples: np.ndarray  # float32 [N] at 16 kHz
    source_rate: int
    channels: int
    text: str | None = None  # a bundled clip's spoken text (None for a user's file)
    notes: list = field(default_factory=list)  # what was done to it (mixed to mono, resampled …)

    @property
    def seconds(self) -> float:
        return len(self.samples) / RATE

    @property
    def frames(self) -> int:
        """Encoder positions that hold the clip (the rest of the 1,500 hold the padding's silence)."""
        return min(1500, math.ceil(self.seconds / FRAME_SECONDS))

    def features(self, n_mels: int = 80):
        """log-mel features [1, n_mels, 3000] by transformers' WhisperFeatureExtractor (30 s, silence-padded)."""
        from transformers import WhisperFeatureExtractor

        fx = WhisperFeatureExtractor(feature_size=n_mels, sampling_rate=RATE)
        out = fx(self.samples, sampling_rate=RATE, return_tensors="pt")
        return out.input_features.float()

    def describe(self) -> str:
        said = f"{self.source}: {self.seconds:.2f} s"
        return said + (f" ({'; '.join(self.notes)})" if self.notes else "")


def bundled_clips() -> dict[str, dict]:
    """The committed espeak-ng clips by name: {"paris": {"file": …, "text": …}, …}."""
    rows = [json.loads(line) for line in (AUDIO_DIR / "utterances.jsonl").read_text().splitlines() if line.strip()]
    return {r["name"]: r for r in rows}


def audio(source, *, max_seconds: float = MAX_SECONDS) -> Audio:
    """An Audio from a WAV path or a bundled clip's name; an Audio is returned as it is."""
    if isinstance(source, Audio):
        return source
    clips = bundled_clips()
    name = str(source)
    if name in clips and not Path(name).exists():
        clip = _read(AUDIO_DIR / clips[name]["file"], name, max_seconds)
        clip.text = clips[name]["text"]
        return clip
    return _read(Path(name), name, max_seconds)


def _read(path: Path, label: str, max_seconds: float) -> Audio:
    if not path.is_file():
        known = ", ".join(bundled_clips())
        raise AudioError(f"no audio file {path}: give a .wav file or a bundled clip ({known})")
    rate, channels, pcm = _pcm(path)
    if not RATES[0] <= rate <= RATES[1]:
        raise AudioError(f"{path}: sample rate {rate} Hz; expected {RATES[0]}–{RATES[1]} Hz (Whisper reads 16 kHz)")
    if pcm.size == 0:
        raise AudioError(f"{path}: the WAV file holds no samples; give a clip with speech in it")
    seconds = pcm.shape[0] / rate
    if seconds > max_seconds:
        raise AudioError(
            f"{path}: {seconds:.1f} s of audio; Whisper reads at most {max_seconds:g} s at once — cut the clip "
            "(e.g. sox in.wav out.wav trim 0 30)"
        )
    notes = []
    mono = pcm.mean(1) if channels > 1 else pcm[:, 0]
    if channels > 1:
        notes.append(f"{channels} channels mixed to mono")
    if rate != RATE:
        mono = resample(mono, rate)
        notes.append(f"resampled from {rate} Hz to {RATE} Hz")
        if rate < RATE:
            notes.append(f"nothing above {rate // 2} Hz: the source holds no higher frequencies")
    return Audio(label, mono.astype(np.float32), rate, channels, notes=notes)


def _pcm(path: Path) -> tuple[int, int, np.ndarray]:
    """(rate, channels, float64 [N, channels] in [−1, 1]) of an integer-PCM WAV file."""
    try:
        with wave.open(str(path), "rb") as w:
            rate, channels, width, n = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            raw = w.readframes(n)
    except (wave.Error, EOFError) as e:
        raise AudioError(
            f"{path}: not a PCM WAV file ({e}); convert it first, e.g. ffmpeg -i in.mp3 -ac 1 -ar 16000 out.wav"
        ) from None
    if width == 1:  # 8-bit WAV is unsigned
        x = (np.frombuffer(raw, np.uint8).astype(np.float64) - 128) / 128
    elif width == 3:  # 24-bit: three little-endian bytes, sign-extended through the top of an int32
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        x = ((b[:, 0] << 8 | b[:, 1] << 16 | b[:, 2] << 24) >> 8) / float(1 << 23)
    else:
        dtype = {2: "<i2", 4: "<i4"}[width]
        x = np.frombuffer(raw, dtype).astype(np.float64) / float(1 << (8 * width - 1))
    return rate, channels, x.reshape(-1, channels)


def resample(x: np.ndarray, rate: int) -> np.ndarray:
    """``x`` at ``rate`` Hz → 16 kHz by scipy's polyphase filter (up/down by the reduced ratio)."""
    from scipy.signal import resample_poly

    g = math.gcd(rate, RATE)
    return resample_poly(x, RATE // g, rate // g)


__all__ = ["FRAME_SECONDS", "RATE", "Audio", "AudioError", "audio", "bundled_clips", "resample"]
