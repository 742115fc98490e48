"""The live explorer on SmolLM2, measured as a user meets it (results in benchmarks/results/serve.json, tables in
docs/benchmarks.md and the README; the screenshots docs/explorer.png with --shots).

    .venv/bin/python benchmarks/serve.py [--clicks 20] [--out benchmarks/results/serve.json] [--shots]

1. Start-up: `attnroute serve --model smollm2` in its own process, from the command to the URL printed, then to
   a usable page (the page fetched and the first text read: the grid is on screen).
2. Click-to-answer: a route cut (POST /api/cut with one route not cut before: nothing from the cache), from
   the request to the answer, p50 and p95 over N clicks, on a 60-token and a 1,000-token text — beside one
   plain forward of the model (transformers' own attention, no hooks, the same tokens) measured in the same
   run on the same machine, while the server is idle.
3. The first read of a new text (the grid) and a head's weights fetched lazily, at both lengths.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data" / "python-docs-topics.jsonl"
URL = re.compile(r"attnroute explorer: (http://\S+)")


def text_of(tokenizer, n: int) -> str:
    """The first corpus documents joined and cut to ``n`` tokens (BOS included), as text."""
    docs = [json.loads(line)["text"] for line in CORPUS.read_text().splitlines()[:40]]
    ids = tokenizer(" ".join(docs), add_special_tokens=False)["input_ids"][: n - 1]
    return tokenizer.decode(ids)


def start() -> tuple[subprocess.Popen, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnroute", "serve", "--model", "smollm2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for line in proc.stdout:
        if m := URL.search(line):
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, m.group(1), time.perf_counter() - t0
    raise RuntimeError("the server did not start")


def plain_forward(lm, ids: torch.Tensor, rounds: int = 5) -> float:
    with torch.no_grad():
        lm.model(input_ids=ids)  # warm
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            lm.model(input_ids=ids, attention_mask=torch.ones_like(ids))
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def clicks(c: httpx.Client, text: str, T: int, n: int) -> list[float]:
    out = []
    for i in range(n):  # a new route each click (layer, head, key differ): the cache never answers
        cut = {"kind": "route", "layer": (7 * i) % 30, "head": i % 9, "query": T - 1, "key": 1 + (3 * i) % (T - 2)}
        t0 = time.perf_counter()
        r = c.post("/api/cut", json={"text": text, "cuts": [cut]})
        out.append(time.perf_counter() - t0)
        assert r.status_code == 200, r.text
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clicks", type=int, default=20)
    ap.add_argument("--lengths", type=int, nargs="+", default=[60, 1000])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "serve.json"))
    ap.add_argument("--shots", action="store_true", help="also write docs/explorer.png and docs/report.png")
    ap.add_argument("--shots-only", action="store_true", help="only the screenshots (no measurement)")
    args = ap.parse_args()
    from attnroute.models import load
    from attnroute.read.stimuli import encode_text

    proc, url, to_url = start()
    base, token = url.split("/?token=")
    if args.shots_only:
        shots(url)
        proc.terminate()
        return
    result = {"machine": f"{torch.get_num_threads()} torch threads", "start_to_url_s": round(to_url, 2), "lengths": []}
    with httpx.Client(base_url=base, headers={"X-Attnroute-Token": token}, timeout=600) as c:
        t0 = time.perf_counter()
        assert httpx.get(url, timeout=60).status_code == 200
        page = time.perf_counter() - t0
        lm = load("smollm2")  # the client side's own copy, for the plain forward and the texts (not timed)
        texts = {n: text_of(lm.tokenizer, n) for n in args.lengths}
        t0 = time.perf_counter()
        c.post("/api/text", json={"text": texts[args.lengths[0]]})
        first = time.perf_counter() - t0  # the first text's read: the grid on screen
        result["start_to_usable_page_s"] = round(to_url + page + first, 2)
        for text in texts.values():
            ids, _ = encode_text(lm.tokenizer, text, None)
            T = ids.shape[1]
            t0 = time.perf_counter()
            grid = c.post("/api/text", json={"text": text}).json()
            first_read = first if text == texts[args.lengths[0]] else time.perf_counter() - t0
            assert len(grid["tokens"]) == T
            t0 = time.perf_counter()
            c.post("/api/head", json={"text": text, "layer": 12, "head": 4})
            head = time.perf_counter() - t0
            times = clicks(c, text, T, args.clicks)
            fwd = plain_forward(lm, ids)
            p50, p95 = float(np.percentile(times, 50)), float(np.percentile(times, 95))
            result["lengths"].append(
                {
                    "tokens": T,
                    "clicks": len(times),
                    "cut_p50_s": round(p50, 3),
                    "cut_p95_s": round(p95, 3),
                    "plain_forward_s": round(fwd, 3),
                    "p50_vs_forward": round(p50 / fwd, 2),
                    "first_read_s": round(first_read, 2),
                    "head_weights_s": round(head, 3),
                }
            )
            print(result["lengths"][-1], flush=True)
        if args.shots:
            shots(url)
    proc.terminate()
    result["exit_status_on_sigterm"] = proc.wait(30)
    result["report_512"] = report_512(lm, text_of(lm.tokenizer, 512))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


def report_512(lm, text: str) -> dict:
    """The offline page of a 512-token text (`attnroute report --max-tokens 512 --no-ablation`): its size,
    the time to build it, and what of the weights it kept."""
    from attnroute.read.report import routing_view
    from attnroute.show import report

    t0 = time.perf_counter()
    view = routing_view(lm, text, ablation=False, max_tokens=512)
    page = report.build(view, kv=None)
    w = page.data["weights"]
    return {
        "tokens": len(view.tokens),
        "seconds": round(time.perf_counter() - t0, 1),
        "page_bytes": len(page.html),
        "format": w["format"],
        "dropped_max": w["dropped_max"],
        "dropped_mean": w["dropped_mean"],
    }


SHOT_TEXT = (
    "When Mary and John went to the store, John gave a drink to Mary. Later Mary and John went home, "
    "and John gave a book to"
)


def shots(url: str) -> None:
    """docs/explorer.png: the explorer after reading a text, an induction head clicked and its strongest
    route from the last token cut; docs/report.png: the saved offline page of the same view."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        ctx = b.new_context(viewport={"width": 1800, "height": 1200}, accept_downloads=True)
        page = ctx.new_page()
        page.goto(url)
        page.wait_for_selector("body[data-ready='idle']", state="attached")
        page.fill("#text", SHOT_TEXT)
        page.click("#run")
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=120_000)
        page.click("#grid rect.cell[data-layer='18'][data-head='6']")
        page.wait_for_selector(".panel[data-head='18.6'] line.route", state="attached", timeout=60_000)
        strongest = page.evaluate(
            """() => { const ls = [...document.querySelectorAll(".panel[data-head='18.6'] line.route")]
              .filter(l => +l.dataset.query === G.tokens.length - 1 && +l.dataset.key !== 0);  // not the sink
              ls.sort((a, b) => b.getAttribute('stroke-width') - a.getAttribute('stroke-width'));
              return [ls[0].dataset.query, ls[0].dataset.key]; }"""
        )
        sel = f".panel[data-head='18.6'] line.route[data-query='{strongest[0]}'][data-key='{strongest[1]}']"
        page.dispatch_event(sel, "click")
        page.wait_for_selector("#cuts li", state="attached", timeout=60_000)
        page.wait_for_timeout(1500)
        page.mouse.move(1, 1)
        page.screenshot(path=str(ROOT / "docs" / "explorer.png"), clip={"x": 0, "y": 0, "width": 1800, "height": 1500})
        with page.expect_download(timeout=120_000) as dl:
            page.click("#save")
        saved = ROOT / "benchmarks" / "results" / "explorer-saved-report.html"
        dl.value.save_as(saved)
        rep = ctx.new_page()
        rep.goto(saved.as_uri())
        rep.wait_for_selector("body[data-ready='1']", state="attached", timeout=60_000)
        rep.mouse.move(1, 1)
        rep.screenshot(path=str(ROOT / "docs" / "report.png"), clip={"x": 0, "y": 0, "width": 1800, "height": 1250})
        saved.unlink()
        b.close()


if __name__ == "__main__":
    main()
