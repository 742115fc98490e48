"""`--model org/name`: through huggingface_hub's own cache, offline when HF_HUB_OFFLINE is set, safetensors
only; when neither the cache nor the hub has it, one line that says both. (No machine here reaches the
hub: the online cases meet a real connection error.)"""

import shutil

import pytest
from read.zoo import build  # the tiny-model zoo of tests/read

from attnroute.models import ModelLoadError, load


def cache_with(tmp_path, repo: str, files_from) -> None:
    """A Hugging Face hub cache holding one snapshot of ``repo`` (the layout huggingface_hub writes)."""
    org, name = repo.split("/")
    root = tmp_path / "hub" / f"models--{org}--{name}"
    snap = root / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(files_from, snap)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(snap.name)


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    return tmp_path


def test_a_cached_hub_model_loads_offline(hub_env, monkeypatch):
    cache_with(hub_env, "acme/tiny-llama", build("llama", hub_env / "built"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    said = []
    lm = load("acme/tiny-llama", progress=said.append)
    assert lm.kind == "causal" and lm.name == "acme/tiny-llama" and lm.n_layers == 2
    assert not any("fetching" in s for s in said)  # offline: the hub is not asked


def test_online_but_unreachable_uses_the_cache_and_says_so(hub_env, monkeypatch):
    cache_with(hub_env, "acme/tiny-bert", build("bert", hub_env / "built"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    said = []
    lm = load("acme/tiny-bert", progress=said.append)
    assert lm.kind == "encoder"
    assert any("using the cached snapshot of acme/tiny-bert" in s and "could not be reached" in s for s in said)


@pytest.mark.parametrize("offline, reason", [("1", "HF_HUB_OFFLINE is set"), ("", "could not be reached")])
def test_neither_cache_nor_hub_is_one_line_naming_both(hub_env, monkeypatch, offline, reason):
    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    with pytest.raises(ModelLoadError) as e:
        load("acme/not-there")
    msg = str(e.value)
    assert "not in the local Hugging Face cache" in msg and reason in msg and "\n" not in msg


def test_a_cached_pickle_checkpoint_is_refused(hub_env, monkeypatch):
    built = build("llama", hub_env / "built")
    (built / "model.safetensors").unlink()
    (built / "pytorch_model.bin").write_bytes(b"not loaded, ever")
    cache_with(hub_env, "acme/pickled", built)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="pickle checkpoints"):
        load("acme/pickled")
