"""The check process: `python -m attnroute.check.child FD`, with CheckSettings as JSON on stdin.

It resolves the target (imports the user's module, or loads an `hf:` model), says its plan, runs the
battery and sends, as JSON lines on file descriptor FD, every event its parent (isolate.py) watches:

    {"pid": …, "event": "resolved", "reports": [{"name": target, "checks": [names]}, …]}
    {"pid": …, "event": "call", "phase": "start" | "end"}      around every call of the target
    {"pid": …, "event": "check", "report": i, "result": {…}}    each check's result, as it ends
    {"pid": …, "event": "done", "run": {…}}                     the whole CheckRun's JSON
    {"pid": …, "event": "refused", "message": …, "field": …}    an InputError (cannot load or call)

A target that prints writes to this process's stdout, which its parent sends to its own stderr: the
JSON never sees it. ``pid`` marks the process: a target that forks cannot speak for it.
"""

from __future__ import annotations

import json
import os
import sys


def main(fd: int) -> int:
    out = os.fdopen(fd, "w", buffering=1)
    pid = os.getpid()

    def send(event: str, **data) -> None:
        if os.getpid() == pid:  # a forked copy of this process stays silent
            out.write(json.dumps({"pid": pid, "event": event, **data}) + "\n")

    from ..errors import InputError
    from ..settings import CheckSettings
    from . import conventions
    from .audit import run_checks

    try:
        settings = CheckSettings(**json.loads(sys.stdin.read()))
        if str(settings.target).startswith("hf:"):  # transformers' own warnings are not the check's output
            from ..models import quiet_transformers

            quiet_transformers()
        conventions.heartbeat = lambda phase: send("call", phase=phase)
        run = run_checks(
            settings,
            on_plan=lambda plan: send("resolved", reports=plan),
            on_check=lambda i, result: send("check", report=i, result=result.to_dict()),
        )
    except InputError as e:
        send("refused", message=str(e), field=e.field)
        return 0
    except Exception as e:  # attnroute's own defect, not the target's: one line for the parent to say
        send("crashed", message=f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
        return 0
    send("done", run=run.to_dict(), passed=run.passed)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
