"""`python -m attnroute …` (what `torchrun -m attnroute …` runs on every rank)."""

import sys


def run() -> int:
    try:
        from .cli import main

        return main()
    except KeyboardInterrupt:  # Ctrl-C while the command line itself imports: one line, 130
        print("interrupted", file=sys.stderr)
        return 130


sys.exit(run())
