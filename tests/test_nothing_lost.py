"""Nothing the user gave is lost, whatever name it was given by: bundled models, their cache and bundled
prompt sets are inputs too; a checkpoint has one writer; files take the user's umask; Ctrl-C at any
moment of a command is one line and 130."""

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnroute.bundled import DATA, cache_dir, model_path
from attnroute.cli import main
from attnroute.errors import InputError


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "argv, victim",
    [
        (
            ["patch", "--model", "minilm", "--clean", "a cat", "--corrupt", "a dog", "--metric", "cosine", "--json"],
            lambda: model_path("minilm") / "config.json",
        ),
        (["patch", "--prompts", "ioi", "--json"], lambda: DATA / "ioi.jsonl"),
        (["heads", "--model", "minilm", "--csv"], lambda: model_path("minilm") / "vocab.txt"),
        (["check", "hf:minilm", "--json"], lambda: model_path("minilm") / "config.json"),
    ],
)
def test_a_name_that_resolves_to_files_is_an_input_the_outputs_never_touch(argv, victim, capsys):
    path = victim()
    before = digest(path)
    assert main([*argv, str(path)]) == 2
    err = capsys.readouterr().err
    assert "would write into" in err and len(err.strip().splitlines()) == 1
    assert digest(path) == before


def test_the_model_cache_is_an_input_of_the_default_model(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    entry = cache_dir() / "SmolLM2-entry"
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")
    assert main(["knockout", "a b c", "--from", "c", "--to", "a", "--json", str(entry / "config.json")]) == 2
    assert "would write into `model`" in capsys.readouterr().err.replace("--model", "`model`")
    assert (entry / "config.json").read_text() == "{}"


def test_one_writer_per_checkpoint(tmp_path):
    from attnroute.read.ground.checkpoint import CheckpointMismatch, exclusive

    ck = tmp_path / "c.ckpt"
    with exclusive(ck):
        with pytest.raises(CheckpointMismatch, match="in use by another attnroute process") as e, exclusive(ck):
            pass
        assert e.value.field == "checkpoint"
    with exclusive(ck):  # released: the next command takes it
        pass
    assert list(tmp_path.iterdir()) == []  # the lock leaves nothing behind


def test_a_second_process_on_the_same_checkpoint_is_refused_in_one_line(tmp_path):
    from attnroute.read.ground.checkpoint import exclusive

    ck = tmp_path / "c.ckpt"
    with exclusive(ck):  # held by this process while another command asks for it
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "attnroute",
                "patch",
                "--model",
                "minilm",
                "--clean",
                "a cat",
                "--corrupt",
                "a dog",
                "--metric",
                "cosine",
                "--checkpoint",
                str(ck),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "in use by another attnroute process" in done.stderr and "Traceback" not in done.stderr


def test_files_take_the_users_umask(tmp_path):
    from attnroute.files import atomic_write

    old = os.umask(0o022)
    try:
        from attnroute import files

        files.umask.cache_clear()
        path = atomic_write(tmp_path / "out.json", lambda tmp: tmp.write_text("{}"))
        assert path.stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)
        files.umask.cache_clear()


@pytest.mark.parametrize("delay", [0.15, 0.3, 0.8, 1.5, 3.0])
def test_ctrl_c_at_any_moment_is_one_line_and_130(delay):
    """From the first imports to the model loading: every moment is one line, 130. (The interpreter's own
    first few tens of milliseconds, before any attnroute code runs, are Python's.)"""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnroute", "heads", "--model", "minilm", "--no-ablation"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:  # it finished first: nothing to interrupt
        return
    # 130, or death by SIGINT after the line: CPython re-raises SIGINT at exit when a KeyboardInterrupt once
    # crossed C code running Python, even if it was caught. A shell shows both as $? = 130, and dying by the
    # signal is what a caller's own Ctrl-C handling expects (www.cons.org/cracauer/sigint.html).
    assert proc.returncode in (130, -signal.SIGINT), err
    assert err.strip().splitlines()[-1].startswith("interrupted") and "Traceback" not in err


def test_ctrl_c_inside_an_import_leaves_at_once_with_one_line(tmp_path):
    """A KeyboardInterrupt raised mid-import can cross C++ that cannot carry it (torch.distributed's pybind11
    init: std::terminate, an abort with a C++ message). The CLI's handler ends the process there instead: the
    module that was importing runs no further line."""
    (tmp_path / "slow_module.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(2)\nprint('after')\n"
    )
    program = "from attnroute.cli import _watch_interrupts; _watch_interrupts(); import slow_module; print('done')"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (130, "", "interrupted\n")


def test_answers_are_checked_where_they_came_from(capsys):
    """An empty or two-token answer given as a flag is the flag's fault, not the prompts'."""
    assert (
        main(
            [
                "patch",
                "--clean",
                "When Mary met John, John gave a book to",
                "--corrupt",
                "When Mary met John, Mary gave a book to",
                "--answer",
                "",
                "--wrong",
                " John",
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.startswith("error: --answer is empty")
    with pytest.raises(InputError) as e:
        from attnroute.promptset import pairs_of

        pairs_of(None, "a b", "a c", "", None, "prob")
    assert e.value.field == "answer"


def _no_load(monkeypatch):
    import attnroute.models.door as door

    fail = lambda *a, **k: pytest.fail("the model loaded before the flag was checked")  # noqa: E731
    monkeypatch.setattr(door, "load_source", fail)  # every load by name goes through the one door


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    from tests.read.zoo import build

    return str(build("bart", tmp_path_factory.mktemp("zoo")))


BLAME = {  # a bad flag is named as that flag (first), before the weights load — never as `--prompts`' row
    "routes two-token answer": (
        ["routes", "a b c", "--answer", " Maryanne-Louise", "--wrong", " x"],
        "--answer",
        "single-token answer",
    ),
    "routes layer past the model": (
        ["routes", "a b c", "--answer", " a", "--wrong", " b", "--layers", "99"],
        "--layers",
        "30 attention layers",
    ),
    "routes on an encoder, default metric": (["routes", "a b c", "--model", "minilm"], "--metric", "encoder"),
    "routes on an encoder, loss": (
        ["routes", "a b c", "--model", "minilm", "--metric", "loss"],
        "--metric",
        "callable",
    ),
    "routes on an encoder, cosine": (
        ["routes", "a b c", "--model", "minilm", "--metric", "cosine"],
        "--metric",
        "callable",
    ),
    "patch empty wrong": (
        ["patch", "--clean", "a b c", "--corrupt", "a b d", "--answer", " c", "--wrong", ""],
        "--wrong",
        "empty",
    ),
    "patch per position on an encoder-decoder": (
        [
            "patch",
            "--model",
            "{bart}",
            "--clean",
            "a b c",
            "--corrupt",
            "a b d",
            "--answer",
            " c",
            "--wrong",
            " d",
            "--positions",
            "each",
        ],
        "--positions",
        "encoder-decoder",
    ),
}


@pytest.mark.parametrize("case", sorted(BLAME))
def test_a_bad_flag_is_blamed_on_that_flag_before_the_model_loads(case, capsys, monkeypatch, request):
    argv, flag, words = BLAME[case]
    if "{bart}" in argv:
        argv = [a.replace("{bart}", request.getfixturevalue("bart")) for a in argv]
    else:
        _no_load(monkeypatch)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag}") and words in err[0], err
    assert "--prompts" not in err[0] and "row 1" not in err[0]


@pytest.mark.parametrize(
    "verb", [["heads", "--model", "minilm"], ["routes"], ["knockout", "--from", "a", "--to", "b"], ["report"]]
)
def test_every_verb_reads_its_text_from_file_or_stdin_with_the_same_checks(verb, tmp_path, capsys, monkeypatch):
    import io

    _no_load(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"caf\xe9 latin-1")))
    assert main([*verb, "--file", "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --file standard input: not UTF-8 text (byte 3)") and len(err.splitlines()) == 1, err
    big = tmp_path / "big.txt"
    from attnroute.cli.common import MAX_TEXT_BYTES

    big.write_bytes(b"a " * (MAX_TEXT_BYTES // 2 + 1))
    assert main([*verb, "--file", str(big)]) == 2
    assert f"a text is at most {MAX_TEXT_BYTES:,}" in capsys.readouterr().err
    if verb[0] != "heads":  # the text as an argument and --file together
        assert main([*verb, "some text", "--file", str(big)]) == 2
        assert "were both given" in capsys.readouterr().err


def test_a_text_from_stdin_is_read_like_the_same_text_given_inline(capsys, monkeypatch):
    import io
    import json

    text = "The cat sat on the mat. The cat sat on the mat."
    assert main(["heads", "--model", "minilm", "--text", text, "--no-ablation", "--json", "-"]) == 0
    inline = json.loads(capsys.readouterr().out)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["heads", "--model", "minilm", "--file", "-", "--no-ablation", "--json", "-"]) == 0
    piped = json.loads(capsys.readouterr().out)
    assert piped["meta"]["tokens"] == inline["meta"]["tokens"] and piped["meta"]["text_tokens"] > 10
    assert piped["rows"] == inline["rows"]


def test_the_tokens_of_a_text_load_the_tokenizer_once():
    import attnroute as ar

    t0 = time.perf_counter()
    first = ar.tokens("minilm", "routing is attention")
    once = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = ar.tokens("minilm", "routing is attention")
    assert first == again and first[0] == "[CLS]"
    assert time.perf_counter() - t0 < max(0.05, once / 5)  # the cached tokenizer, not a second load
