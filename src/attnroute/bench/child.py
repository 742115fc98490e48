"""One way to measure in a child process: the module ``MODULE`` run as ``python -m MODULE ARGS…`` would run
it, printing one JSON line, in a process of its own.

Each memory measurement runs in a fresh process so the allocator state of one cell cannot hide or
inflate another's peak. The processes are forked from one helper process (``python -m
attnroute.bench.child``, started once per measuring process) that imported torch and nothing else: a
child is a new process holding nothing any other cell allocated, as a fresh interpreter is, without
paying torch's import again (1.8 s of each 2.5 s child on 2 cores; the 8 cells of `bench --quick` and
of `cost bill` each spent about 15 s importing). multiprocessing's forkserver would re-run the main
module in every child (`python -m attnroute` is the command line itself), hence this plain fork.
A child that fails, or runs past ``timeout`` seconds, gives a dict with an ``error`` field instead of a
number (right or refused: a failed cell is never a figure).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
import traceback

_HELPER: list = []  # the helper process, started once per process


def _helper() -> subprocess.Popen:
    if not _HELPER or _HELPER[0].poll() is not None:
        cmd = [sys.executable, "-m", "attnroute.bench.child"]
        _HELPER[:] = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)]
    return _HELPER[0]


def run_child(module: str, *args, timeout: float | None = None) -> dict:
    """The JSON object the child prints on its last line, or {"error": "..."}."""
    helper = _helper()
    helper.stdin.write(json.dumps({"module": module, "args": [str(a) for a in args]}) + "\n")
    helper.stdin.flush()
    started = _answer(helper)
    if started is None:
        return {"error": "the helper process that forks the children ended"}
    killed = threading.Event()
    timer = threading.Timer(timeout, _kill, (started["pid"], killed)) if timeout is not None else None
    if timer:  # past the timeout the child is killed; the helper reports its end either way
        timer.start()
    done = _answer(helper) or {"exit": -1, "said": None}
    if timer:
        timer.cancel()
    if killed.is_set():
        return {"error": f"over {timeout} s"}
    said = done["said"]
    if done["exit"] != 0 or said is None:
        why = (said or {}).get("error") or ("killed" if done["exit"] < 0 else "no output")
        return {"error": f"exit {done['exit']}: {why[:200]}"}
    return said


def _kill(pid: int, killed: threading.Event) -> None:
    killed.set()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _answer(helper: subprocess.Popen) -> dict | None:
    line = helper.stdout.readline()
    return json.loads(line) if line else None


# ---------------------------------------------------------------- the helper process and its children


def _serve() -> None:
    """The helper: one request per line on stdin ({"module", "args"}); for each, a forked child runs the
    module, and two lines answer on stdout: {"pid"} at once, {"exit", "said"} when the child has ended."""
    # A Ctrl-C reaches the whole process group: the measuring process says it; the helper outlives it (and
    # ends when its stdin closes), and the cell in flight dies of it (_child restores SIGINT's default).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch  # noqa: F401  (the import every child would otherwise pay)

    for line in sys.stdin:
        req = json.loads(line)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _child(req["module"], req["args"], write)  # never returns
        os.close(write)
        _say({"pid": pid})
        with os.fdopen(read, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        _say({"exit": os.waitstatus_to_exitcode(status), "said": json.loads(data) if data else None})


def _say(answer: dict) -> None:
    """One answer line to the measuring process; if it has gone (a Ctrl-C, a crash), the helper leaves
    quietly: no traceback of a broken pipe on the user's terminal."""
    try:
        print(json.dumps(answer), flush=True)
    except (BrokenPipeError, ValueError):
        os._exit(0)


def _child(module: str, args: list[str], write: int) -> None:
    """In the forked child: the module run as __main__ with ``args``, its stdout's last line sent back as JSON
    (an exception: its traceback's last line, exit 1)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a Ctrl-C ends the cell (the helper ignores it)
    quiet = os.open(os.devnull, os.O_RDWR)  # the helper's stdin and stdout are its protocol: no C-level
    os.dup2(quiet, 0)  # write of the cell's may reach them
    os.dup2(quiet, 1)
    sys.argv = [module, *args]
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        lines = out.getvalue().strip().splitlines()
        said = json.loads(lines[-1]) if lines else {"error": "the child printed nothing"}
    except SystemExit as e:  # sys.exit(0) ends a cell like returning; any other code fails it
        code = 0 if e.code in (0, None) else 1
        lines = out.getvalue().strip().splitlines()
        said = json.loads(lines[-1]) if code == 0 and lines else {"error": f"exit {e.code}"}
    except BaseException:  # noqa: BLE001  (any failure of the cell is its error, said in one line)
        code, said = 1, {"error": traceback.format_exc().strip().splitlines()[-1]}
    with os.fdopen(write, "wb") as f:  # the whole answer, however long (os.write may write part of it)
        f.write(json.dumps(said).encode())
    os._exit(code)  # not the helper's own exit path: its stdin loop belongs to the helper


if __name__ == "__main__":
    _serve()


__all__ = ["run_child"]
