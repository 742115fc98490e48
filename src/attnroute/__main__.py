"""`python -m attnroute …` (what `torchrun -m attnroute …` runs on every rank)."""

import sys


def run() -> int:
    try:
        from .cli import main

        return main()
    except KeyboardInterrupt:  # Ctrl-C while the command line itself imports: one line, 130
        return interrupted()


def interrupted() -> int:
    from .errors import ignore_interrupts

    ignore_interrupts()  # a second Ctrl-C while it exits changes nothing
    print("interrupted", file=sys.stderr)
    return 130


def leave(code: int) -> None:
    """Exit with ``code``. After a Ctrl-C (130) the interpreter's own shutdown is skipped (os._exit, the output
    flushed first): a burst of Ctrl-Cs still ended, once in many runs, as a death by SIGINT (exit −2) after
    "interrupted" was said with SIGINT already ignored — the cause was not pinned down, and 130 is what the
    user must see; what the command had to write or refuse was settled before 130 was returned."""
    if code != 130:
        sys.exit(code)
    from .errors import exit_now

    exit_now(130)


try:
    status = run()
except KeyboardInterrupt:  # one more in the instant before the first was handled
    status = interrupted()
leave(status)
