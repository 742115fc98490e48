"""`python -m attnroute …` (what `torchrun -m attnroute …` runs on every rank)."""

import signal
import sys


def run() -> int:
    try:
        from .cli import main

        return main()
    except KeyboardInterrupt:  # Ctrl-C while the command line itself imports: one line, 130
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second one while it exits changes nothing
        print("interrupted", file=sys.stderr)
        return 130


sys.exit(run())
