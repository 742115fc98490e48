"""Cells measured in child processes forked from one helper (bench/child.py): each child a process of its own
that prints one JSON line, a failed or overlong cell an ``error`` and never a figure."""

import os
import signal
import threading
import time
from pathlib import Path

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


def test_a_ctrl_c_ends_the_cell_in_flight_and_the_helper_lives_on(cells):
    assert child.run_child("cell_ok")["pid"] > 0
    helper = child._HELPER[0].pid

    def ctrl_c():  # as a Ctrl-C reaches the process group: the helper and the cell in flight get SIGINT
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cells_now = Path(f"/proc/{helper}/task/{helper}/children").read_text().split()
            if cells_now:
                time.sleep(0.5)  # the cell is into its sleep
                os.kill(helper, signal.SIGINT)
                os.kill(int(cells_now[0]), signal.SIGINT)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=ctrl_c)
    thread.start()
    said = child.run_child("cell_sleeps", timeout=30)
    thread.join()
    assert said == {"error": "exit -2: killed"}  # the cell ended by the signal, not by its timeout
    assert child.run_child("cell_ok")["pid"] > 0  # the helper ignored it and measures on


def test_a_real_cell_measures_memory_in_its_child():
    m = child.run_child("attnroute.bench.peak_memory", "eager", 512)
    assert m["peak_extra_bytes"] >= 2 * 8 * 512 * 512 * 4 * 0.9  # scores and weights, [1, 8, 512, 512] fp32
