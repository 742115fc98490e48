"""Audio input for a speech model (Whisper): a WAV file read, mixed to mono, resampled to 16 kHz, and turned
into the log-mel features Whisper's encoder reads (transformers' WhisperFeatureExtractor, so the features
are the model's own, not a reimplementation).

    clip = audio("speech.wav")        # or a bundled clip by name: "paris", "fox", … (data/audio/)
    clip.samples                      # float32 [N] at 16 kHz, in [−1, 1]
    clip.features(80)                 # torch [1, 80, 3000]: 30 s of frames, the clip padded with silence

Only uncompressed integer PCM WAV is read, of any sample width from 8 to 64 bits, plain or in the
WAVE_FORMAT_EXTENSIBLE layout (what ffmpeg writes for 24-bit). The RIFF chunks are read here (Python 3.11's
``wave`` knows neither the extensible layout nor widths past 32 bits), and the header is checked before any
sample is read: its length against Whisper's window, its data size against the file's. Resampling is scipy's
polyphase filter (``resample_poly``, an anti-aliasing FIR). Refused in one line each: another format, a
header the data disagrees with (a truncated file), an empty clip, one longer than Whisper's 30-second
window, a sample rate outside 8–192 kHz.
"""

from __future__ import annotations

import json
import math
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
    fmt = wav_format(path)
    rate, channels = fmt.rate, fmt.channels
    if not RATES[0] <= rate <= RATES[1]:
        raise AudioError(f"{path}: sample rate {rate} Hz; expected {RATES[0]}–{RATES[1]} Hz (Whisper reads 16 kHz)")
    if fmt.frames == 0:
        raise AudioError(f"{path}: the WAV file holds no samples; give a clip with speech in it")
    seconds = fmt.frames / rate
    if seconds > max_seconds:  # from the header: nothing is read of a clip that is too long
        raise AudioError(
            f"{path}: {_seconds(seconds, max_seconds)} s of audio ({fmt.frames:,} samples at {rate:,} Hz); Whisper "
            f"reads at most {max_seconds:g} s at once — cut the clip (e.g. sox in.wav out.wav trim 0 30)"
        )
    pcm = _samples(path, fmt)
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


def _seconds(seconds: float, limit: float) -> str:
    """``seconds`` said so that it reads as over ``limit``: one decimal (31.2), or exactly when that would
    round to the limit itself (30.00005, not "30.0 s … at most 30 s")."""
    said = f"{seconds:.1f}"
    return said if float(said) > limit else repr(round(seconds, 9))


@dataclass(frozen=True)
class WavFormat:
    """What a WAV header says: integer PCM of ``width`` bytes a sample, ``frames`` frames at ``offset``."""

    rate: int
    channels: int
    width: int
    frames: int
    offset: int


PCM, EXTENSIBLE = 1, 0xFFFE  # WAVE_FORMAT_PCM, WAVE_FORMAT_EXTENSIBLE (its sub-format GUID starts with the tag)
CONVERT = "convert it first, e.g. ffmpeg -i in.mp3 -ac 1 -ar 16000 out.wav"


def wav_format(path: Path) -> WavFormat:
    """The header of an integer-PCM WAV file, checked against the file's size; no sample is read."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            raise AudioError(f"{path}: not a PCM WAV file (no RIFF/WAVE header); {CONVERT}")
        fmt = None
        while True:
            chunk = f.read(8)
            if len(chunk) < 8:
                raise AudioError(f"{path}: not a PCM WAV file (no data chunk); {CONVERT}")
            kind, n = chunk[:4], int.from_bytes(chunk[4:], "little")
            if kind == b"fmt ":
                fmt = _fmt(path, f.read(n))
                f.seek(n % 2, 1)
            elif kind == b"data":
                if fmt is None:
                    raise AudioError(f"{path}: not a PCM WAV file (its data comes before its format); {CONVERT}")
                return _checked(path, fmt, n, f.tell(), size)
            else:
                f.seek(n + n % 2, 1)  # other chunks (LIST, fact, …) skipped; chunks are padded to even sizes


def _fmt(path: Path, body: bytes) -> tuple[int, int, int, int]:
    """(rate, channels, bytes a sample, block align) of a PCM or extensible-PCM format chunk; else refused."""
    if len(body) < 16:
        raise AudioError(f"{path}: not a PCM WAV file (a format chunk of {len(body)} bytes); {CONVERT}")
    tag, channels = int.from_bytes(body[0:2], "little"), int.from_bytes(body[2:4], "little")
    rate, align = int.from_bytes(body[4:8], "little"), int.from_bytes(body[12:14], "little")
    bits = int.from_bytes(body[14:16], "little")
    if tag == EXTENSIBLE and len(body) >= 26:
        tag = int.from_bytes(body[24:26], "little")  # the sub-format GUID's first two bytes: the format's tag
    if tag != PCM:
        raise AudioError(f"{path}: not integer PCM (WAV format tag {tag:#x}, e.g. float or compressed); {CONVERT}")
    if bits % 8 or not 8 <= bits <= 64 or channels < 1:
        raise AudioError(f"{path}: {bits}-bit samples in {channels} channels; integer PCM of 8 to 64 bits is read")
    width = bits // 8
    if align != width * channels:
        raise AudioError(f"{path}: the header's block size ({align}) is not {channels} channels × {width} bytes")
    return rate, channels, width, align


def _checked(path: Path, fmt: tuple, data_bytes: int, offset: int, size: int) -> WavFormat:
    """The format, its data size against what the file holds (a truncated file is refused, not read short)."""
    rate, channels, width, align = fmt
    if offset + data_bytes > size or data_bytes % align:
        raise AudioError(
            f"{path}: the header says {data_bytes:,} bytes of samples and the file holds {size - offset:,} "
            "after it: truncated or damaged; convert or record it again"
        )
    return WavFormat(rate, channels, width, data_bytes // align, offset)


def _samples(path: Path, fmt: WavFormat) -> np.ndarray:
    """float64 [frames, channels] in [−1, 1]: 8-bit unsigned, wider widths signed little-endian."""
    with open(path, "rb") as f:
        f.seek(fmt.offset)
        raw = f.read(fmt.frames * fmt.width * fmt.channels)
    w = fmt.width
    if w == 1:  # 8-bit WAV is unsigned
        x = (np.frombuffer(raw, np.uint8).astype(np.float64) - 128) / 128
    else:  # each sample's bytes at the top of an int64, then shifted down: sign-extended for any width
        b = np.frombuffer(raw, np.uint8).reshape(-1, w)
        wide = np.zeros((b.shape[0], 8), np.uint8)
        wide[:, 8 - w :] = b
        x = (wide.view("<i8")[:, 0] >> (8 * (8 - w))).astype(np.float64) / float(1 << (8 * w - 1))
    return x.reshape(-1, fmt.channels)


def resample(x: np.ndarray, rate: int) -> np.ndarray:
    """``x`` at ``rate`` Hz → 16 kHz by scipy's polyphase filter (up/down by the reduced ratio)."""
    from scipy.signal import resample_poly

    g = math.gcd(rate, RATE)
    return resample_poly(x, RATE // g, rate // g)


__all__ = ["FRAME_SECONDS", "RATE", "Audio", "AudioError", "audio", "bundled_clips", "resample"]
