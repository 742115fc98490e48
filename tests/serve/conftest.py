"""The explorer as a user runs it: `attnroute serve` in its own process on a free loopback port, its URL
read from stdout, stopped with SIGTERM (which must exit 0). One SmolLM2 server for the module's tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest

URL = re.compile(r"attnroute explorer: (http://\S+)")


@dataclass
class Server:
    proc: subprocess.Popen
    url: str  # with ?token=
    base: str  # http://127.0.0.1:PORT
    token: str
    lines: list  # stdout and stderr lines, as they came

    def headers(self) -> dict:
        return {"X-Attnroute-Token": self.token}

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def start(*args: str, timeout: float = 120, preexec_fn=None) -> Server:
    """`attnroute serve ARGS` until it prints its URL (a failed start: its output in the failure).
    ``preexec_fn`` runs in the child before it starts (a lower open-file limit)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnroute", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=preexec_fn,
    )
    lines: list[str] = []
    found = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if URL.search(line):
                found.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found.is_set() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not found.is_set():
        proc.kill()
        pytest.fail("attnroute serve did not print its URL:\n" + "\n".join(lines[-20:]))
    url = next(URL.search(x).group(1) for x in lines if URL.search(x))
    base, token = url.split("/?token=")
    return Server(proc, url, base, token, lines)


@pytest.fixture(scope="session")
def smollm2_server():
    server = start("--model", "smollm2", "--queue", "4")
    yield server
    assert server.stop() == 0, "\n".join(server.lines[-20:])


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    from tests.read.zoo import build

    return str(build("llama", tmp_path_factory.mktemp("zoo")))
