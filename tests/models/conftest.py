import pytest


@pytest.fixture
def encoder_runs(monkeypatch):
    """A list that grows by one at every Whisper encoder forward (any model object, loaded here or by a verb):
    a verb's cost on a clip is counted in encoder runs (1,500 frames, about 1.3 s each on one core)."""
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    runs = []
    forward = WhisperEncoder.forward
    monkeypatch.setattr(WhisperEncoder, "forward", lambda self, *a, **k: runs.append(1) or forward(self, *a, **k))
    return runs
