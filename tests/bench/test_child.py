"""Cells measured in child processes forked from one helper (bench/child.py): each child a process of its own
that prints one JSON line, a failed or overlong cell an ``error`` and never a figure."""

import os

import pytest

from attnroute.bench import child


@pytest.fixture
def cells(tmp_path, monkeypatch):
    """A helper of this test's own, able to import the cell modules written under tmp_path."""
    (tmp_path / "cell_ok.py").write_text('import json, os\nprint("noise")\nprint(json.dumps({"pid": os.getpid()}))\n')
    (tmp_path / "cell_fails.py").write_text('raise ValueError("the cell could not measure")\n')
    (tmp_path / "cell_sleeps.py").write_text("import time\ntime.sleep(60)\n")
    (tmp_path / "cell_exits.py").write_text("import os\nos._exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(child, "_HELPER", [])
    yield
    for helper in child._HELPER:
        helper.stdin.close()
        helper.wait(10)


def test_each_cell_is_a_process_of_its_own_and_failures_are_errors(cells):
    a, b = child.run_child("cell_ok"), child.run_child("cell_ok")
    assert a["pid"] != b["pid"] != os.getpid()  # a fresh process per cell (its last line is the JSON)
    assert child.run_child("cell_fails") == {"error": "exit 1: ValueError: the cell could not measure"}
    assert child.run_child("cell_exits") == {"error": "exit 3: no output"}
    assert child.run_child("cell_sleeps", timeout=1) == {"error": "over 1 s"}
    assert child.run_child("cell_ok")["pid"] > 0  # the helper outlives a failed, a dead and a killed cell


def test_a_real_cell_measures_memory_in_its_child():
    m = child.run_child("attnroute.bench.peak_memory", "eager", 512)
    assert m["peak_extra_bytes"] >= 2 * 8 * 512 * 512 * 4 * 0.9  # scores and weights, [1, 8, 512, 512] fp32
