"""The explorer's server against hostile clients: an idle flood under a low open-file limit, bodies cut
off mid-way, unknown paths and hosts, malformed fields, a model it refuses, and jobs that leave the queue
while they wait. Every refusal is a 4xx with one line of JSON; nothing leaves a traceback in the log."""

from __future__ import annotations

import contextlib
import resource
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from attnroute.serve.errors import Cancelled
from attnroute.serve.guard import waiting_cap
from attnroute.serve.worker import Job, Worker

from .conftest import start

LIMIT = 256  # the open-file limit the flood test gives the server


def low_fd_limit():  # runs in the server's process before it starts
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def port_of(server) -> int:
    return int(server.base.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def flooded_server(tiny_llama):
    server = start("--model", tiny_llama, preexec_fn=low_fd_limit)
    yield server
    assert server.stop() == 0, "\n".join(server.lines[-20:])


def test_300_idle_connections_do_not_lock_out_the_client_with_the_token(flooded_server):
    """More idle sockets than the server has file descriptors: the oldest waiting ones are closed, so the
    client with the token still connects and is answered."""
    server = flooded_server
    idle = []
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", port_of(server)), timeout=5)
            idle.append(s)
        with httpx.Client(base_url=server.base, headers=server.headers(), timeout=20) as c:
            r = c.get("/api/info")
            assert r.status_code == 200 and r.json()["kind"] == "causal"
        closed = 0
        # the server hung up on all but at most `cap` of them, before it answered the client above: their FINs
        # are here already, and each one still open waits out the timeout (0.2 s: 19 s of CI for 96 sockets)
        for s in idle:
            s.settimeout(0.02)
            try:
                closed += s.recv(1) == b""
            except (TimeoutError, ConnectionResetError) as e:
                closed += isinstance(e, ConnectionResetError)
        cap = (LIMIT - 64) // 2
        assert closed >= 300 - cap - 1, f"only {closed} of 300 idle connections were closed"
    finally:
        for s in idle:
            s.close()
    assert "Traceback" not in "\n".join(server.lines)


def test_the_waiting_cap_follows_the_open_file_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, hard))
        assert waiting_cap() == (LIMIT - 64) // 2
        resource.setrlimit(resource.RLIMIT_NOFILE, (70, hard))
        assert waiting_cap() == 4  # never zero: some client must get in
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def raw(server, data: bytes) -> bytes:
    """Send bytes on a fresh connection, then half-close it and read what comes back."""
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=20) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_body_cut_off_mid_way_leaves_no_traceback_and_the_server_serves(flooded_server):
    server = flooded_server
    head = (
        f"POST /api/text HTTP/1.1\r\nHost: 127.0.0.1:{port_of(server)}\r\n"
        f"X-Attnroute-Token: {server.token}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    raw(server, head.encode() + b'{"text": "only the start of')
    with httpx.Client(base_url=server.base, headers=server.headers(), timeout=20) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health").json()["queue"] == 0
    assert "Traceback" not in "\n".join(server.lines)


def one_line_json(r: httpx.Response) -> str:
    assert r.headers["content-type"].startswith("application/json"), r.text
    error = r.json()["error"]
    assert isinstance(error, str) and "\n" not in error and error
    return error


@pytest.mark.parametrize(
    "method, path, body, host, status, said",
    [
        ("GET", "/no/such/page", None, None, 404, "not found"),
        ("GET", "/api/info", None, "evil.example", 400, "host"),
        ("POST", "/api/report", {"text": "a b c", "cuts": "layer 0"}, None, 400, "cuts: expected a list"),
        ("POST", "/api/report", {"text": "a b c", "cuts": {"kind": "head"}}, None, 400, "cuts: expected a list"),
        ("POST", "/api/text", b"{not json", None, 400, "json"),
        ("GET", "/api/text", None, None, 405, "method"),
    ],
)
def test_every_refusal_is_a_4xx_with_one_line_of_json(flooded_server, method, path, body, host, status, said):
    server = flooded_server
    headers = dict(server.headers())
    if host:
        headers["Host"] = host
    if isinstance(body, bytes):
        headers["Content-Type"] = "application/json"
    kw = {"content": body} if isinstance(body, bytes) else {"json": body} if body is not None else {}
    with httpx.Client(base_url=server.base, timeout=20) as c:
        r = c.request(method, path, headers=headers, **kw)
    assert r.status_code == status, r.text
    assert said in one_line_json(r).lower()
    assert "Traceback" not in "\n".join(server.lines)


def test_serving_a_model_it_refuses_is_one_line_and_exit_2(tmp_path):
    from tests.read.zoo import build

    t5 = build("t5", tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "attnroute", "serve", "--model", str(t5)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: --model") and "encoder-decoder" in lines[-1], lines
    assert not any("loading" in line for line in lines), "refused after the weights loaded"
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------- the queue counts only live jobs


def blocking_worker(queue: int = 4):
    """A worker whose first job holds it until `release` is set."""
    worker, release, started = Worker(queue), threading.Event(), threading.Event()

    def hold(job):
        started.set()
        release.wait(30)
        return "held"

    first = worker.submit(hold, Job("first"))
    assert started.wait(10)
    return worker, release, first


def test_jobs_cancelled_while_queued_leave_the_count():
    worker, release, first = blocking_worker()
    futures = [worker.submit(lambda job: "ran", Job(f"q{i}")) for i in range(4)]
    assert worker.pending == 5
    assert all(f.cancel() for f in futures)  # their clients left while they waited
    assert worker.pending == 1  # only the running job remains
    release.set()
    assert first.result(10) == "held"
    deadline = time.monotonic() + 10
    while worker.pending:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    worker.shutdown()


def test_a_job_whose_time_ran_out_in_the_queue_never_runs_and_is_counted_out():
    worker, release, first = blocking_worker()
    ran = []
    job = Job("late")
    future = worker.submit(lambda j: ran.append(j.id), job)
    job.cancelled.set()  # its time limit passed while it waited
    release.set()
    with pytest.raises(Cancelled):
        future.result(10)
    assert ran == [] and worker.pending == 0 and worker.jobs == {}
    # the queue is free again: as many new jobs as it holds are accepted
    futures = [worker.submit(lambda j: j.id, Job(f"n{i}")) for i in range(5)]
    assert [f.result(10) for f in futures] == [f"n{i}" for i in range(5)]
    worker.shutdown()


def test_a_job_cancelled_mid_forward_stops_at_the_next_layer_and_leaves_the_model_as_it_was(tiny_llama):
    """A running job stops at its forward's next attention call, not at its verb's next progress event (a
    prompt-pair patch ran 5 s past the server's grace between two); the model's attention is its own again.
    The check is the worker thread's alone: the same forward outside a job runs whole."""
    import torch

    import attnroute as ar
    from attnroute.read.adapter import routed

    lm = ar.load_model(tiny_llama)
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.no_grad():
        want = lm.model(ids).logits
    impl, layers = lm.model.config._attn_implementation, lm.n_layers
    seen = []

    def work(job):
        def attended(layer, *_):  # the client goes away while layer 0 attends
            seen.append(layer)
            job.cancelled.set()

        with torch.no_grad(), routed(lm, before_attend=[attended]):
            lm.model(ids)
        return "ran to the end"

    worker = Worker(1)
    with pytest.raises(Cancelled):
        worker.submit(work, Job("mid-forward")).result(30)
    assert layers > 1 and seen == [0]  # layer 1's attention call was the check that stopped it
    worker.shutdown()
    assert lm.model.config._attn_implementation == impl
    with torch.no_grad():
        assert torch.equal(lm.model(ids).logits, want)
    seen.clear()
    with routed(lm, before_attend=[lambda layer, *_: seen.append(layer)]), torch.no_grad():
        lm.model(ids)  # this thread has no check: every layer attends
    assert seen == list(range(layers))


def test_a_full_queue_refuses_at_once_with_retry_after():
    from attnroute.serve.errors import RequestError

    worker, release, _ = blocking_worker(queue=1)
    worker.submit(lambda j: None, Job("waiting"))
    with pytest.raises(RequestError) as e:
        worker.submit(lambda j: None, Job("one too many"))
    assert e.value.status == 503 and int(e.value.headers["Retry-After"]) >= 1
    release.set()
    worker.shutdown()
    assert worker.pending == 0


def test_the_health_queue_is_zero_after_clients_left_behind_a_long_request(flooded_server):
    """Through HTTP: one long request runs, nine clients give up while queued behind it; once the long one
    ends the idle server reports an empty queue and serves the next request."""
    server = flooded_server
    with httpx.Client(base_url=server.base, headers=server.headers(), timeout=10) as c:
        room = c.get("/api/info").json()["max_tokens"]
    long = " ".join(["the cat sat on the mat"] * (room // 8))
    body = {"clean": long + " alice", "corrupt": long + " bob", "answer": " alice", "wrong": " bob"}
    got = {}

    def long_request():
        with httpx.Client(base_url=server.base, headers=server.headers(), timeout=120) as c:
            got["long"] = c.post("/api/pair", json={**body, "job": "long"})

    t = threading.Thread(target=long_request)
    t.start()
    with httpx.Client(base_url=server.base, headers=server.headers(), timeout=10) as c:
        deadline = time.monotonic() + 60
        while c.get("/api/progress", params={"id": "long"}).json()["id"] is None and "long" not in got:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    for i in range(9):  # each gives up after 50 ms, most while the long request still holds the worker
        with httpx.Client(base_url=server.base, headers=server.headers(), timeout=0.05) as c:
            with contextlib.suppress(httpx.TimeoutException):
                c.post("/api/text", json={"text": f"left behind {i} " + long})
    t.join(120)
    with httpx.Client(base_url=server.base, headers=server.headers(), timeout=30) as c:
        deadline = time.monotonic() + 30
        while c.get("/health").json()["queue"] != 0:
            assert time.monotonic() < deadline, c.get("/health").json()
            time.sleep(0.05)
        assert c.post("/api/text", json={"text": "served"}).status_code == 200
    assert got["long"].status_code == 200, got["long"].text
    assert "Traceback" not in "\n".join(server.lines)
