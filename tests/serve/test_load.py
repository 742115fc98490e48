"""Bounded load and faults against the live SmolLM2 server (loopback only): many clients at once finish or
get 503 quickly, /health answers throughout, memory stays bounded, a client killed mid-request is dropped."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil

TEXT = "The lighthouse keeper counted the ships that passed the rocky point every night."


def test_ten_clients_times_five_requests_finish_or_get_503_while_health_answers(smollm2_server):
    base, headers = smollm2_server.base, smollm2_server.headers()
    with httpx.Client(base_url=base, headers=headers, timeout=120) as c:
        T = len(c.post("/api/text", json={"text": TEXT}).json()["tokens"])  # the text's state, once
    rss = psutil.Process(smollm2_server.proc.pid)
    before = rss.memory_info().rss
    health, stop = [], threading.Event()

    def poll_health():
        with httpx.Client(base_url=base, headers=headers, timeout=5) as c:
            while not stop.is_set():
                t0 = time.perf_counter()
                ok = c.get("/health").status_code == 200
                health.append((ok, time.perf_counter() - t0))
                time.sleep(0.05)

    def client(n):
        out = []
        with httpx.Client(base_url=base, headers=headers, timeout=60) as c:
            for i in range(5):  # distinct cuts: nothing comes from the cache
                cut = {"kind": "route", "layer": (n * 5 + i) % 30, "head": n % 9, "query": T - 1, "key": 1 + i}
                t0 = time.perf_counter()
                r = c.post("/api/cut", json={"text": TEXT, "cuts": [cut]})
                out.append((r.status_code, time.perf_counter() - t0, r.headers.get("retry-after")))
        return out

    poller = threading.Thread(target=poll_health)
    poller.start()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(10) as pool:
        results = [x for xs in pool.map(client, range(10)) for x in xs]
    wall = time.perf_counter() - t0
    stop.set()
    poller.join()
    codes = [c for c, _, _ in results]
    assert len(results) == 50 and set(codes) <= {200, 503} and codes.count(200) >= 5
    assert all(ra is not None and int(ra) >= 1 for c, _, ra in results if c == 503)  # Retry-After, never a hang
    assert max(s for _, s, _ in results) < 60 and wall < 90
    # /health answers throughout (every poll 200); its latency is a liveness bound that holds on a loaded 2-core
    # machine (the model's forwards share the cores with it), not a timing target (benchmarks/serve.py times it)
    waits = sorted(s for _, s in health)
    assert health and all(ok for ok, _ in health) and waits[len(waits) // 2] < 1.0 and waits[-1] < 5
    assert rss.memory_info().rss - before < 400 * 2**20  # bounded: the LRU and one forward at a time


def test_a_client_killed_mid_request_does_not_stop_the_server_and_its_work_is_dropped(smollm2_server):
    host, port = smollm2_server.base.removeprefix("http://").split(":")
    body = (
        b'{"clean": "When Anna and Tom went out, Tom gave a gift to", "corrupt": "When Anna and Tom went out, '
        b'Anna gave a gift to", "answer": " Anna", "wrong": " Tom", "job": "killed-client"}'
    )
    request = (
        f"POST /api/pair HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"X-Attnroute-Token: {smollm2_server.token}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with httpx.Client(base_url=smollm2_server.base, headers=smollm2_server.headers(), timeout=30) as c:
        with socket.create_connection((host, int(port))) as s:  # a client that sends the slow request and dies
            s.sendall(request)
            t0 = time.perf_counter()  # it dies once the server holds its job (an event, not a sleep)
            while c.get("/api/progress", params={"id": "killed-client"}).json()["id"] is None:
                assert time.perf_counter() - t0 < 30, "the request never reached the worker"
                time.sleep(0.05)
        t0 = time.perf_counter()
        while c.get("/api/progress", params={"id": "killed-client"}).json()["id"] is not None:
            assert time.perf_counter() - t0 < 30, "the dropped client's work kept running"
            time.sleep(0.2)
        assert c.get("/health").json() == {"status": "ok", "queue": 0}
        assert c.post("/api/text", json={"text": "Still serving."}).status_code == 200
