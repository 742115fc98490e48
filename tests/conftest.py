import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Deterministic, bounded property tests: CI has 2 cores and 15 minutes for everything (set-up and lint included).
settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("ATTNROUTE_EXAMPLES", "25")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")
# Under pytest-xdist (`make test` runs two workers) each worker takes one core: the tensors here are small,
# so two processes on one thread each beat one process on two (measured: see the Makefile).
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, os.cpu_count() or 1) // WORKERS)
torch.set_num_threads(THREADS)
# The processes tests start (servers, the CLI, torchrun ranks) take the same count: no oversubscription, and
# their sums run in the same order as this process's when a test compares the two.
os.environ["OMP_NUM_THREADS"] = str(THREADS)


@pytest.fixture(scope="session")
def smollm2():
    from attnroute.models import load

    return load("smollm2")  # the first load in a fresh cache dequantizes the GGUF (~25 s on one core), once


@pytest.fixture(scope="session")
def minilm():
    from attnroute.models import load

    return load("minilm")


@pytest.fixture(scope="session")
def whisper():
    from attnroute.models import load

    return load("whisper-tiny")  # converted from CTranslate2 once (~4 s), then cached as safetensors


@pytest.fixture(scope="session")
def gemma():
    from attnroute.models import load

    return load("gemma3-270m")  # assembled and dequantized once (~50 s on one core), then cached


MODEL_FIXTURES = {"smollm2", "minilm", "whisper", "gemma"}


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test when any model loads by name or path: every load goes through the one door
    (models/door.py), so a check said to come before the weights is tested where it must be."""
    import attnroute.models.door as door

    def fail(*args, **kwargs):
        pytest.fail("the model loaded before the input was checked")

    monkeypatch.setattr(door, "load_source", fail)


# The longest modules (seconds of one worker, full run on 2 cores, 2026-12-03, after knockout's batched windows),
# collected first. `make test` hands whole modules to whichever of its two workers is free, in collection order
# (--no-loadscope-reorder; xdist's own order is by number of tests, which put these few-test, minute-long modules
# last, and a long module started last leaves the other worker idle until it ends).
FIRST = [
    "tests/serve/test_browser.py",  # 168
    "tests/models/test_gemma.py",  # 154
    "tests/models/test_whisper.py",  # 102
    "tests/read/test_corpus.py",  # 90
    "tests/models/test_whisper_circuits.py",  # 76
    "tests/check/test_cli_check.py",  # 67
    "tests/learn/test_induction.py",  # 63
    "tests/serve/test_lifecycle.py",  # 50
    "tests/check/test_battery.py",  # 50
]


def pytest_collection_modifyitems(items):
    """Tests that read a real model are `slow` (seconds to a minute each); `make test` runs them all,
    `pytest -m "not slow"` leaves them out for a quick loop. The FIRST modules go first (a stable sort)."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {path: i for i, path in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(FIRST)))


@pytest.fixture(autouse=True)
def _own_checkpoint_cache(tmp_path_factory, monkeypatch):
    """Each test its own checkpoint cache (runs checkpoint there by default): one test never resumes another's
    run, and nothing lands in the user's cache."""
    monkeypatch.setenv("ATTNROUTE_RUNS", str(tmp_path_factory.mktemp("runs")))
