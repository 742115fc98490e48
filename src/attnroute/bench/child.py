"""One way to measure in a child process: ``python -m MODULE ARGS…`` printing one JSON line.

Each memory measurement runs in a fresh process so the allocator state of one cell cannot hide or
inflate another's peak. A child that fails, or runs past ``timeout`` seconds, gives a dict with an
``error`` field instead of a number (right or refused: a failed cell is never a figure).
"""

from __future__ import annotations

import json
import subprocess
import sys


def run_child(module: str, *args, timeout: float | None = None) -> dict:
    """The JSON object the child prints on its last line, or {"error": "..."}."""
    cmd = [sys.executable, "-m", module, *map(str, args)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["killed"])[-1]
        return {"error": f"exit {out.returncode}: {last[:200]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


__all__ = ["run_child"]
