"""Running the battery in a check process that can be stopped: timeouts that hold against any target.

A thread cannot stop a target that holds the interpreter (a busy loop in Python holding the GIL), and a
module that hangs, prints or exits while it is imported takes its caller with it. So `attnroute check`
runs the battery in a child process (child.py) and watches its events:

- loading (importing the module, or loading an `hf:` model) must end within LOAD_TIMEOUT (an `hf:`
  model) or max(LOAD_FLOOR, 6 × timeout) seconds, else the check is refused: the target did not load;
- a call of the target must end within timeout + CALL_GRACE seconds, else the process is stopped, that
  check fails (the target hung, holding the interpreter) and the checks after it are not called —
  what a hung target gets in process too;
- a process that ends without its result (the target exited, or crashed the interpreter) is said so;
- the target's prints go to stderr: with `--json -` stdout carries the JSON alone;
- the process runs in its own session: a target that forks leaves no process behind.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

from ..errors import InputError
from .outcome import CheckResult, Outcome
from .report import CheckReport

LOAD_TIMEOUT = 600.0  # seconds an hf: model may take to load (Gemma's first load dequantizes for ~90 s)
LOAD_FLOOR = 10.0  # seconds a module may take to load, however short --timeout: the check process imports torch
CALL_GRACE = 2.0  # seconds past the per-call timeout before a call counts as holding the interpreter
QUIET = 120.0  # seconds without any event between calls (a check of the model end to end runs no call)


class _Watch:
    """The child's events as they come, with the plan and the results so far."""

    def __init__(self, proc: subprocess.Popen, fd: int):
        self.proc, self.fd, self.buf = proc, fd, b""
        self.plan: list[dict] | None = None
        self.results: dict[int, list[dict]] = {}
        self.in_call = False

    def next(self, deadline: float) -> dict | None:
        """The next event, {"event": "eof"} when the child closed its end, None past ``deadline``."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return {"event": "eof"}
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        event = json.loads(line)
        return event if event.get("pid") == self.proc.pid else self.next(deadline)


def run_isolated(settings, timeout: float) -> list[CheckReport] | None:
    """The reports of the battery run in a check process (see the module docstring); InputError when the
    target cannot be loaded or called."""
    read, write = os.pipe()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnroute.check.child", str(write)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        pass_fds=(write,),
        start_new_session=True,
        env=env,
    )
    os.close(write)
    echo = threading.Thread(target=_to_stderr, args=(proc.stdout,), daemon=True)  # the target's prints: stderr
    echo.start()
    try:
        proc.stdin.write(json.dumps(asdict(settings)).encode())
        proc.stdin.close()
        return _follow(_Watch(proc, read), settings, timeout)
    finally:
        _stop(proc)
        os.close(read)


def _follow(w: _Watch, settings, timeout: float) -> list[CheckReport]:
    hf = str(settings.target).startswith("hf:")
    deadline = time.monotonic() + (LOAD_TIMEOUT if hf else max(LOAD_FLOOR, 6 * timeout))
    while True:
        e = w.next(deadline)
        if e is None and w.plan is None:
            raise InputError(
                f"{settings.target} did not load within {deadline_said(hf, timeout)}: the module (or "
                "model) hangs while it is imported",
                field="target",
            )
        if e is None or e["event"] == "eof":
            return _cut_short(w, settings, timeout, hung=e is None)
        if e["event"] == "refused":
            raise InputError(e["message"], field=e.get("field") or "target")
        if e["event"] == "crashed":
            raise InputError(
                f"the check of {settings.target} failed inside attnroute ({e['message']}); please report it",
                field="target",
            )
        if e["event"] == "done":
            run = e["run"]
            return [CheckReport.from_dict(r) for r in run.get("targets", [run])]
        if e["event"] == "resolved":
            w.plan = e["reports"]
        elif e["event"] == "check":
            w.results.setdefault(e["report"], []).append(e["result"])
        elif e["event"] == "call":
            w.in_call = e["phase"] == "start"
        deadline = time.monotonic() + (timeout + CALL_GRACE if w.in_call else max(QUIET, 6 * timeout))


def deadline_said(hf: bool, timeout: float) -> str:
    return f"{LOAD_TIMEOUT:g} s" if hf else f"{max(LOAD_FLOOR, 6 * timeout):g} s (six times --timeout)"


def _cut_short(w: _Watch, settings, timeout: float, hung: bool) -> list[CheckReport]:
    """The reports of a run that ended early: the checks done, the one the target hung in (or ended the
    process in) failed, the rest not called."""
    if w.plan is None:
        status = _status(w.proc)
        raise InputError(
            f"{settings.target} ended the check process while loading (exit status {status}) "
            "before any check ran: does the module exit, or crash, when it is imported?",
            field="target",
        )
    if hung:
        why = (
            f"the target did not return within {timeout:g} s and held the interpreter (no thread could stop it): "
            "the check process was stopped"
        )
        later = f"not called: the target hung earlier (no answer within {timeout:g} s)"
    else:
        why = f"the target ended the check process (exit status {_status(w.proc)}) during this check"
        later = "not called: the target ended the check process earlier"
    reports, cut = [], False
    for i, plan in enumerate(w.plan):
        done = {r["name"]: CheckResult.from_dict(r) for r in w.results.get(i, [])}
        checks = []
        for name in plan["checks"]:
            if name in done:
                checks.append(done[name])
            else:
                checks.append(CheckResult(name, outcome=Outcome.FAIL, detail=later if cut else why))
                cut = True
        reports.append(CheckReport(plan["name"], checks, strict=settings.strict))
    return reports


def _to_stderr(stream) -> None:
    for line in iter(stream.readline, b""):
        sys.stderr.write(line.decode("utf-8", "replace"))


def _status(proc: subprocess.Popen):
    """The child's exit status, once it has ended (its end of the pipe closes just before)."""
    try:
        return proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return "none yet"


def _stop(proc: subprocess.Popen) -> None:
    """End the check process and anything it started (its own session)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    else:
        try:  # a target that forked: its children outlive the process
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


__all__ = ["CALL_GRACE", "LOAD_TIMEOUT", "run_isolated"]
