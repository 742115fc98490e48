"""`python -m attnroute …` (what `torchrun -m attnroute …` runs on every rank)."""

import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line itself imports: one line, 130
    print("interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
