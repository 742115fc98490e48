"""`attnroute serve` starting and stopping as a process: SIGINT/SIGTERM exit 0 with in-flight work finished,
--host beyond loopback warns and still needs the token, a taken port or a bad flag is one line (exit 2)
before the model loads, a request past --time-limit is stopped (504) and the server keeps serving."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

from .conftest import start


def test_sigterm_lets_the_request_in_flight_finish_and_exits_0(tiny_llama):
    server = start("--model", tiny_llama, "--time-limit", "60")
    got = {}

    def request():
        with httpx.Client(base_url=server.base, headers=server.headers(), timeout=60) as c:
            text = "A text that is read and saved while the server stops."
            got["r"] = c.post("/api/report", json={"text": text, "job": "in-flight"})

    t = threading.Thread(target=request)
    t.start()
    with httpx.Client(base_url=server.base, headers=server.headers(), timeout=10) as c:  # the signal comes once the
        deadline = time.monotonic() + 30  # request is in flight (or done): an event, not a sleep
        while c.get("/api/progress", params={"id": "in-flight"}).json()["id"] is None and "r" not in got:
            assert time.monotonic() < deadline, "the request never reached the worker"
            time.sleep(0.02)
    assert server.stop(signal.SIGTERM) == 0, "\n".join(server.lines)
    t.join(30)
    assert got["r"].status_code in (200, 503) and "Traceback" not in "\n".join(server.lines)


def test_wide_host_warns_needs_the_token_stops_slow_requests_and_exits_0_on_sigint(tiny_llama):
    server = start("--model", tiny_llama, "--host", "0.0.0.0", "--time-limit", "0.05")
    try:
        out = "\n".join(server.lines)
        assert "warning: --host 0.0.0.0 listens beyond this machine" in out and "token is still required" in out
        assert httpx.get(server.base + "/api/info", timeout=10).status_code == 401
        with httpx.Client(base_url=server.base, headers=server.headers(), timeout=60) as c:
            assert c.get("/api/info").status_code == 200
            long = " ".join(["the cat sat on the mat"] * 12)
            r = c.post(
                "/api/pair",
                json={"clean": long + " alice", "corrupt": long + " bob", "answer": "alice", "wrong": "bob"},
            )
            assert r.status_code == 504 and "--time-limit" in r.json()["error"]
            deadline = time.monotonic() + 30
            while c.get("/health").json()["queue"] != 0:  # the stopped job leaves the worker
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert c.get("/api/info").status_code == 200
    finally:
        assert server.stop(signal.SIGINT) == 0, "\n".join(server.lines)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnroute", "serve", *args], capture_output=True, text=True, timeout=120
    )


def test_a_taken_port_and_bad_flags_are_one_line_before_the_model_loads(tiny_llama):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        t0 = time.perf_counter()
        r = run_cli("--model", tiny_llama, "--port", str(port))
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr
    assert "loading" not in r.stderr and time.perf_counter() - t0 < 30
    for flags, said in (
        (["--port", "70000"], "--port"),
        (["--max-tokens", "1"], "--max-tokens"),
        (["--time-limit", "0"], "--time-limit"),
        (["--host", "a b"], "--host"),
    ):
        r = run_cli("--model", tiny_llama, *flags)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_sigterm_past_the_grace_cancels_the_request_in_one_line_and_exits_0():
    """A request still running when the grace runs out is cancelled: the client gets a one-line JSON answer
    or a closed connection — never a plain-text 500 — the log holds no traceback, and the exit is 0.
    (SmolLM2: its prompt-pair request over 200 tokens runs for seconds, far past the 0.2 s grace.)"""
    server = start("--model", "smollm2", "--time-limit", "60", "--grace", "0.2", "--max-tokens", "256")
    got = {}
    with httpx.Client(base_url=server.base, headers=server.headers(), timeout=10) as c:
        room = c.get("/api/info").json()["max_tokens"]
    long = " ".join(["the cat sat on the mat"] * (room // 8))
    body = {"clean": long + " Mary", "corrupt": long + " John", "answer": " Mary", "wrong": " John", "job": "long"}

    def request():
        with httpx.Client(base_url=server.base, headers=server.headers(), timeout=60) as c:
            try:
                got["r"] = c.post("/api/pair", json=body)
            except httpx.HTTPError as e:  # the connection closed under it
                got["error"] = e

    t = threading.Thread(target=request)
    t.start()
    with httpx.Client(base_url=server.base, headers=server.headers(), timeout=10) as c:
        deadline = time.monotonic() + 30
        while c.get("/api/progress", params={"id": "long"}).json()["id"] is None and not got:
            assert time.monotonic() < deadline, "the request never reached the worker"
            time.sleep(0.01)
    assert server.stop(signal.SIGTERM) == 0, "\n".join(server.lines)
    t.join(30)
    log = "\n".join(server.lines)
    assert "Traceback" not in log, log
    assert "timeout graceful shutdown exceeded" in log  # it did run past the grace
    if "r" in got:  # answered as cancelled: JSON
        r = got["r"]
        assert r.status_code == 503 and r.headers["content-type"].startswith("application/json"), r.text
