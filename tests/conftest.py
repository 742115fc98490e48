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

    return load("smollm2")  # the first load in a fresh cache dequantizes the GGUF (~11 s on one core), once


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

    return load("gemma3-270m")  # assembled and dequantized once (~31 s on one core), then cached


MODEL_FIXTURES = {"smollm2", "minilm", "whisper", "gemma"}


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test when any model loads by name or path: every load goes through the one door
    (models/door.py), so a check said to come before the weights is tested where it must be."""
    import attnroute.models.door as door

    def fail(*args, **kwargs):
        pytest.fail("the model loaded before the input was checked")

    monkeypatch.setattr(door, "load_source", fail)


# Every module of 10 s or more (seconds of one worker, full run on 2 cores, 2026-12-06), longest first: `make
# test` hands whole modules to whichever of its two workers is free, in collection order (--no-loadscope-reorder;
# xdist's own order is by number of tests, which put few-test, minute-long modules last). Longest first, the
# short ones last (the rest, in collection order) is the longest-processing-time rule: a long module started
# last would leave the other worker idle until it ended.
FIRST = [
    "tests/models/test_gemma.py",  # 106
    "tests/models/test_whisper.py",  # 103
    "tests/serve/test_browser.py",  # 99
    "tests/models/test_whisper_circuits.py",  # 71
    "tests/read/test_corpus.py",  # 70
    "tests/learn/test_induction.py",  # 49
    "tests/check/test_cli_check.py",  # 45
    "tests/learn/test_pruning.py",  # 42
    "tests/read/test_low_precision.py",  # 41
    "tests/read/test_heads.py",  # 41
    "tests/check/test_battery.py",  # 40
    "tests/models/test_door.py",  # 39
    "tests/read/test_circuits.py",  # 39
    "tests/serve/test_notebook.py",  # 38
    "tests/serve/test_lifecycle.py",  # 38
    "tests/check/test_hf_zoo.py",  # 35
    "tests/read/test_support_matrix.py",  # 34
    "tests/read/test_patching.py",  # 31
    "tests/show/test_report.py",  # 31
    "tests/serve/test_speech_explorer.py",  # 28
    "tests/test_refusals.py",  # 25
    "tests/learn/test_scale.py",  # 24
    "tests/check/test_isolation.py",  # 23
    "tests/serve/test_hostile.py",  # 23
    "tests/read/test_knockout.py",  # 22
    "tests/serve/test_load.py",  # 21
    "tests/test_nothing_lost.py",  # 20
    "tests/show/test_speech_page.py",  # 20
    "tests/models/test_loading_refusals.py",  # 20
    "tests/learn/test_crossattn.py",  # 20
    "tests/read/test_suffix.py",  # 17
    "tests/models/test_dtype.py",  # 17
    "tests/read/test_patching_cli.py",  # 16
    "tests/read/test_patching_ranks.py",  # 16
    "tests/read/test_memory_cap.py",  # 15
    "tests/cost/test_fit.py",  # 15
    "tests/models/test_placement.py",  # 13
    "tests/serve/test_api.py",  # 13 (its circuit, 24 s, is the page's, cached: tests/serve/test_browser.py)
    "tests/learn/test_feedforward.py",  # 13
    "tests/bench/test_gpu_check.py",  # 12
    "tests/check/test_real_gallery.py",  # 11
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
