"""`python -m attnroute …` (what `torchrun -m attnroute …` runs on every rank)."""

import sys

from .cli import main

sys.exit(main())
