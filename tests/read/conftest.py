import pytest

from attnroute.read.models import load


@pytest.fixture(scope="session")
def smollm2():
    return load("smollm2")  # the first load in a fresh cache dequantizes the GGUF (~20 s), once


@pytest.fixture(scope="session")
def minilm():
    return load("minilm")
