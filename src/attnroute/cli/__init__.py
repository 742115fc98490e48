"""attnroute's command line: each command parses its flags, builds a settings object, calls one
function of the floors below and hands the result to show/.

    attnroute report | serve | heads | knockout | swap | needle | patch | routes | circuit | why | composition
              | check | cost | learn | bench | cache

Exit status: 0 success, 1 a check failed, 2 bad input or a target that cannot be loaded, 130
interrupted. Every refusal is an InputError raised below this floor; main() maps it once to one line
on stderr, the field named as its flag, never a traceback.

Output conventions, the same on every command:
    --json [PATH]   write the result as JSON to PATH; `--json` alone or `--json -` means stdout
                    (then stdout carries only the JSON and tables go to stderr)
    --plot PATH, --png-dir DIR, --out PATH   files are written only where the user names them
                    (`report` writes routing-report.html when --out is left out: the page is the product)

No module of this package imports torch when it is imported: `attnroute --help` and a bad flag answer
before torch loads.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys

from ..errors import SEEN, InputError, Interrupted, exit_now, ignore_interrupts, was_interrupted
from . import bench, cache, check, cost, experiments, heads, learn, patching, report, serve
from .common import later_rank

# each adds its parsers to the CLI
COMMANDS = (bench, heads, experiments, patching, check, report, serve, learn, cost, cache)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnroute", description="Transformer attention as routing.")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add(sub)
    return p


def main(argv=None) -> int:
    try:
        if argv is None:  # the program: a Ctrl-C is remembered, so that what it breaks is said as the interrupt
            _watch_interrupts()
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C before a command starts: the same one line
        return _interrupted("interrupted", argv is None)
    try:
        return _run(args, parser, argv)
    except Exception:
        if was_interrupted():  # a Ctrl-C that landed mid-import breaks it in odd ways (a RecursionError): still 130
            return _interrupted("interrupted", argv is None)
        raise


def _watch_interrupts() -> None:
    """SIGINT still raises KeyboardInterrupt, and is remembered first (main() tells its aftermath from a bug).
    The first one also ignores the rest: a second Ctrl-C while the first unwinds (progress bars closing,
    threads joining, a checkpoint being written) would raise inside that unwinding and escape as a death by
    SIGINT (exit −2) after "interrupted" was said — seen when the two came 0.2 s apart on a busy machine."""
    import signal

    def handler(sig, frame):
        SEEN.append(sig)
        ignore_interrupts()
        if _importing(frame):  # nothing of the user's is open yet: leave now rather than raise into C++
            print("interrupted", file=sys.stderr)
            exit_now(130)
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGINT, handler)


def _importing(frame) -> bool:
    """Is a module being imported under ``frame``? A KeyboardInterrupt raised there can cross C++ that cannot
    carry a Python exception: torch.distributed's pybind11 init runs Python code, and the exception thrown
    through it ends in std::terminate — an abort with a C++ message instead of one line (seen at 0.8 s into
    `heads`). Commands import lazily before their work starts, so an import is a moment with nothing to save."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _run(args, parser, argv) -> int:
    try:
        return args.fn(args)
    except InputError as e:  # one line, never a traceback; under torchrun said once, by rank 0
        if was_interrupted():  # a library turned the Ctrl-C into its own error: it is still the interrupt
            return _interrupted("interrupted", argv is None)
        if not later_rank():
            print(
                f"error: {refusal_line(e, command_parser(parser, args), getattr(args, 'fields', {}))}", file=sys.stderr
            )
        return 2
    except Interrupted as e:  # Ctrl-C in a long read: where it stopped, how to resume
        return _interrupted(f"interrupted: {e}", argv is None)
    except KeyboardInterrupt:  # Ctrl-C anywhere else: one line, no traceback
        return _interrupted("interrupted", argv is None)
    except BrokenPipeError:  # `attnroute … | head`: the reader left; nothing more to say
        sys.stderr.close()
        return 0


def _interrupted(line: str, program: bool) -> int:
    """One line and 130. When main() is the program (argv from sys.argv), a second Ctrl-C while the process
    winds down (threads joining, files closing) is ignored: it would otherwise escape as a traceback and a
    death by SIGINT after the line was said. A caller's own process (main([...]) in a test) is left as is."""
    if program:
        ignore_interrupts()
    print(line, file=sys.stderr)
    return 130


def refusal_line(e: InputError, command: argparse.ArgumentParser, aliases: dict | None = None) -> str:
    """The one line for a refusal, with fields named as the flags the user typed.

    Library messages name fields, never flags. Three forms name a field, and only they are mapped: the
    message's first word when it is the error's own field (``max_tokens must be …`` → ``--max-tokens
    must be …``), a field in backticks (```model``` → ``--model``), and a field spelled with an
    underscore (``kv_heads``: no English word has one). Other words are left alone, so a word of the
    user's text that happens to be a flag's name stays a word. When the field has a flag and the
    message did not name it, the flag leads.
    """
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    flags = {a.dest: max(a.option_strings, key=len) for a in command._actions if a.option_strings}
    flags.update(aliases or {})
    named = False
    if e.field in flags and re.match(rf"{re.escape(e.field)}(?![\w-])", msg):
        msg, named = flags[e.field] + msg[len(e.field) :], True
    for field in set(re.findall(r"`([a-z_]+)`", msg)):
        if field in flags:
            msg = msg.replace(f"`{field}`", flags[field])
            named |= field == e.field
    for field in (f for f in flags if "_" in f):
        msg, n = re.subn(rf"(?<![\w`-]){re.escape(field)}(?=[\s:,;)]|$)", flags[field], msg)  # a name, not x=1
        named |= bool(n) and field == e.field
    if e.field in flags and not named:
        msg = f"{flags[e.field]}: {msg}"
    return re.sub(r"`([a-z_]+)`", r"\1", msg)  # a field with no flag (a positional argument) keeps its name


def command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The (sub)subparser that parsed this command line: its options are the flags to name."""
    p = parser
    while True:
        sub = next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub else None
        if name not in (sub.choices if sub else {}):
            return p
        p = sub.choices[name]


__all__ = ["build_parser", "main", "refusal_line"]
