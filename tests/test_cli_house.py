"""The command line stays a thin floor: small handlers, nothing heavy imported until a command runs,
so `attnroute --help` and a bad flag answer before torch loads (docs/architecture.md, "The CLI")."""

import argparse
import ast
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import attnroute

CLI = Path(attnroute.__file__).parent / "cli"
MAX_LINES = 25  # a handler's body, its docstring not counted
PARSER_BUILDERS = {"add", "build_parser", "corpus_flags", "json_flag", "model_flag"}  # declarations, not logic
LIGHT = {
    "errors",
    "settings",
    "progress",
    "cli",
    "promptset",
    "bundled",
}  # what cli/ may import at module level (no torch below them)


def functions(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def body_lines(fn: ast.FunctionDef) -> int:
    first = fn.body[0]
    has_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    start = fn.body[1].lineno if has_doc and len(fn.body) > 1 else first.lineno
    return fn.end_lineno - start + 1


def long_handlers(root: Path, limit: int = MAX_LINES) -> list[str]:
    return [
        f"{path.name}:{fn.name} has {body_lines(fn)} lines"
        for path in sorted(root.glob("*.py"))
        for fn in functions(path)
        if fn.name not in PARSER_BUILDERS and body_lines(fn) > limit
    ]


def heavy_imports(root: Path) -> list[str]:
    """Imports at module level (not inside a function) of anything but the light floors."""
    found = []
    for path in sorted(root.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                found += [f"{path.name}: import {a.name}" for a in node.names if a.name.split(".")[0] in HEAVY]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level == 0 and module.split(".")[0] in HEAVY:
                    found.append(f"{path.name}: from {module}")
                elif node.level >= 1:
                    floor = (module.split(".")[0] if node.level == 2 else "cli") if module else "cli"
                    if floor not in LIGHT:
                        found.append(f"{path.name}: from {'.' * node.level}{module}")
    return found


HEAVY = {"torch", "numpy", "transformers", "matplotlib", "rich", "safetensors", "scipy", "starlette", "uvicorn"}


def test_no_cli_handler_is_over_25_lines():
    assert long_handlers(CLI) == []


def test_the_cli_imports_nothing_heavy_at_module_level():
    assert heavy_imports(CLI) == []


def test_the_checks_can_fail(tmp_path):
    (tmp_path / "fat.py").write_text(
        "import torch\nfrom ..read.heads import read_heads\nfrom .common import say\n\n\ndef run(args):\n"
        + "".join(f"    x{i} = {i}\n" for i in range(30))
    )
    assert long_handlers(tmp_path) == ["fat.py:run has 30 lines"]
    assert heavy_imports(tmp_path) == ["fat.py: import torch", "fat.py: from ..read.heads"]


def run_python(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)


def test_help_imports_no_torch():
    done = run_python("-X", "importtime", "-m", "attnroute", "--help")
    assert done.returncode == 0 and "usage: attnroute" in done.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    assert "attnroute" in imported and not imported & {"torch", "numpy", "transformers"}


def test_a_bad_flag_is_refused_before_torch_loads():
    bad = [
        ["heads", "--max-tokens", "0"],
        ["knockout", "a b", "--from", "a", "--to", "b", "--heads", ","],
        ["needle", "--lengths", ""],
        ["report", "--generate", "9999"],
        ["cost", "kv", "--layers", "2"],
    ]
    code = f"import sys; from attnroute.cli import main; print([main(a) for a in {bad!r}], 'torch' in sys.modules)"
    done = run_python("-c", code)
    assert done.stdout.strip() == "[2, 2, 2, 2, 2] False", done.stderr
    assert done.stderr.count("error: ") == 5 and "Traceback" not in done.stderr


@given(st.text(max_size=40))
def test_a_list_flag_is_integers_or_one_refusal(text):
    from attnroute.cli.common import int_list
    from attnroute.errors import InputError

    try:
        values = int_list(text, "heads")
    except InputError as e:
        assert str(e).startswith("heads must be comma-separated integers") and e.field == "heads"
    else:
        assert values and all(isinstance(v, int) for v in values)
        assert values == tuple(int(x) for x in text.split(","))


PLAIN = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Zl", "Zp"), blacklist_characters="`_"), max_size=60)


@given(PLAIN, st.sampled_from(["max_tokens", "heads", "text", "model", None]))
def test_the_refusal_line_never_turns_a_plain_word_into_a_flag(message, field):
    """Without backticks or underscores the only change is the error's own field: mapped where the
    message starts with it, else its flag leads."""
    import re

    from attnroute.cli import build_parser, command_parser, refusal_line
    from attnroute.errors import InputError

    parser = build_parser()
    line = refusal_line(InputError(message, field=field), command_parser(parser, parser.parse_args(["heads"])))
    flag = {"max_tokens": "--max-tokens", "text": "--text", "model": "--model"}.get(field)
    body = message or "InputError"
    if flag is None:
        assert line == body
    elif re.match(rf"{field}(?![\w-])", body):
        assert line == flag + body[len(field) :]
    else:
        assert line == f"{flag}: {body}"


def test_flags_replace_field_names_in_three_places_only():
    from attnroute.cli import build_parser, command_parser, refusal_line
    from attnroute.errors import InputError

    parser = build_parser()
    heads = command_parser(parser, parser.parse_args(["heads"]))
    cases = {
        ("max_tokens must be at least 2, got 0", "max_tokens"): "--max-tokens must be at least 2, got 0",
        ("give `corpus` or `text`/`file`, not both", "corpus"): "give --corpus or --text/--file, not both",
        ("choose checkpoint_every, then", None): "choose --checkpoint-every, then",
        ("the word model stays a word", "model"): "--model: the word model stays a word",
        ("heads 6 must be a multiple", None): "heads 6 must be a multiple",
    }
    for (message, field), expected in cases.items():
        assert refusal_line(InputError(message, field=field), heads) == expected


def test_a_fixed_none_never_hides_the_flag_the_user_gave():
    """`circuit --model X` with no clips passes model=None as a fixed value (the clip default unused): the
    user's --model must still be read — once it was silently replaced by the settings' default."""
    import argparse

    from attnroute.cli.common import settings_from
    from attnroute.settings import CircuitSettings

    args = argparse.Namespace(model="my-model-dir", prompts="ioi", top=None, fn=None)
    assert settings_from(CircuitSettings, args, model=None).model == "my-model-dir"
    assert settings_from(CircuitSettings, args, model="whisper-tiny").model == "whisper-tiny"


def test_every_commands_help_is_written():
    """`learn crossattn --help` was a traceback: a settings field's doc said "100 % token accuracy" and
    argparse %-formats help. Every command's and subcommand's help is formatted here, torch-free."""
    from attnroute.cli import build_parser

    def parsers(p: argparse.ArgumentParser):
        yield p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from parsers(child)

    helped = [p.prog for p in parsers(build_parser()) if p.format_help()]
    assert "attnroute learn crossattn" in helped and len(helped) > 20
