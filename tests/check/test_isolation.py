"""`attnroute check` runs its target in a process it can stop: a target that holds the interpreter, hangs or
exits while it is imported, prints, forks or returns the wrong thing is reported in one line or one verdict,
never followed; and the report leads with the root cause."""

import json
import os
import time

import pytest

from attnroute.check import isolate
from attnroute.cli import main

TARGETS = {
    "holds.py": "def attn(q, k, v, attn_mask=None):\n    return sum(range(10**14))  # C: the GIL is never let go\n",
    "hangs.py": "while True:\n    pass\n",
    "exits.py": "import sys\nsys.exit(0)\n",
    "prints.py": (
        "import torch\nprint('imported, and saying so')\n"
        "def attn(q, k, v, attn_mask=None):\n    print('called')\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,"
        " enable_gqa=q.shape[1] != k.shape[1])\n"
    ),
    "ints.py": (
        "import torch\ndef attn(q, k, v, attn_mask=None):\n"
        "    return torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.long)\n"
    ),
    "forks.py": (
        "import os, torch\n"
        "def attn(q, k, v, attn_mask=None):\n    if os.fork() == 0:\n        import time; time.sleep(60); os._exit(0)\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,"
        " enable_gqa=q.shape[1] != k.shape[1])\n"
    ),
    "bugs.py": (
        "import math, torch\n"
        "def _s(q, k):\n    G = q.shape[1] // k.shape[1]\n"
        "    return q @ k.repeat_interleave(G, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])\n"
        "def _out(w, q, v):\n    return torch.nan_to_num(w) @ v.repeat_interleave(q.shape[1] // v.shape[1], 1)\n"
        "def wrong_axis(q, k, v, attn_mask=None):\n    s = _s(q, k)\n"
        "    s = s if attn_mask is None else s.masked_fill(~attn_mask, float('-inf'))\n"
        "    return _out(torch.softmax(s, dim=-2), q, v)\n"
        "def inverted_past_batch_1(q, k, v, attn_mask=None):\n    s = _s(q, k)\n"
        "    if attn_mask is not None:\n        m = attn_mask if q.shape[0] == 1 else ~attn_mask\n"
        "        s = s.masked_fill(~m, float('-inf'))\n"
        "    return _out(torch.softmax(s, dim=-1), q, v)\n"
    ),
}


@pytest.fixture
def targets(tmp_path, monkeypatch):
    for name, text in TARGETS.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    code = main(["check", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_target_that_holds_the_interpreter_is_stopped_and_named(targets, capsys):
    t0 = time.monotonic()
    code, out, err = run(capsys, "holds.py:attn", "--timeout", "1", "--only", "scale,causal", "--json", "-")
    data = json.loads(out)
    assert code == 1 and time.monotonic() - t0 < 60
    first, second = data["checks"]
    assert "held the interpreter" in first["detail"] and second["detail"].startswith("not called: the target hung")


@pytest.mark.parametrize("module, said", [("hangs", "did not load within"), ("exits", "ended the check process")])
def test_a_module_that_hangs_or_exits_at_import_is_refused_in_one_line(targets, capsys, monkeypatch, module, said):
    if module == "hangs":  # it never loads, whatever the floor: 10 s of waiting said nothing more than 3
        monkeypatch.setattr(isolate, "LOAD_FLOOR", 3.0)
    t0 = time.monotonic()
    code, _, err = run(capsys, f"{module}:attn", "--timeout", "0.5")
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1 and time.monotonic() - t0 < 60


def test_prints_never_reach_the_json_and_file_paths_are_targets(targets, capsys):
    code, out, err = run(capsys, str(targets / "prints.py") + ":attn", "--only", "causal", "--json", "-")
    assert code == 0 and json.loads(out)["checks"][0]["outcome"] == "pass"  # stdout: the JSON alone
    assert "called" in err


def test_wrong_output_types_and_forks_are_verdicts_not_tracebacks(targets, capsys):
    code, out, err = run(capsys, "ints:attn", "--only", "causal")
    assert code == 1 and "expected floating point" in out and "Traceback" not in err
    code, out, err = run(capsys, "forks:attn", "--only", "causal,padding_right")
    assert code in (0, 1) and "Traceback" not in err
    assert not any(p.name() == "python" and "forks" in " ".join(p.cmdline()) for p in _children())


def _children():
    import psutil

    return psutil.Process(os.getpid()).children(recursive=True)


def test_an_empty_list_of_checks_is_refused_not_read_as_all(targets, capsys):
    code, _, err = run(capsys, "prints:attn", "--only", ",")
    assert code == 2 and "--only" in err and len(err.strip().splitlines()) == 1


def test_the_report_leads_with_the_root_cause(targets, capsys):
    code, out, _ = run(capsys, "bugs:wrong_axis")
    assert code == 1
    first = out.splitlines()[0]
    assert "root cause: the softmax runs over the queries" in first and "explains 54 of 54" in first
    code, out, _ = run(capsys, "bugs:inverted_past_batch_1", "--json", "-")
    rc = json.loads(out)["root_cause"]
    assert rc["mechanism"] == "inverted_mask" and rc["only"].startswith("only at batch > 1 (batch 1 is right)")
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["masked_keys"]["cause"] == "inverted_mask"  # a symptom of the mask, not of the q·k matmul
    assert "q·k matmul" not in checks["masked_keys"]["detail"]


def test_the_documented_names_resolve():
    import attnroute
    from attnroute.check import Unsupported

    assert attnroute.check.Unsupported is Unsupported  # docs/check.md's spelling, though attnroute.check is a function
