"""Serving simulation: the same request stream under contiguous reservation and under paging.

A step decodes one token for every running request. Memory is counted in token slots:

    contiguous   each admitted request reserves max_len slots up front (static KV allocation for
                 the longest sequence it might reach, as pre-paging servers did)
    paged        a request holds ceil(len / block_size) blocks and takes one more when it crosses a
                 block boundary; when no block is free, the most recently admitted request is
                 preempted (its blocks freed, it re-queues and recomputes: vLLM's recompute policy)
    paged+shared as paged, but the full blocks of a shared prompt prefix (a system prompt) are
                 stored once per prefix group (reference-counted, copy-on-write)

Reported per policy: the share of reserved KV memory that holds real tokens (time-averaged),
its complement (waste), the largest concurrent batch, and the steps to serve everything.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

POLICIES = ("contiguous", "paged", "paged+shared")
DISTRIBUTIONS = {
    # name: (prompt median, output median, lognormal sigma, shared system-prompt tokens)
    "chat": (160, 200, 0.8, 64),
    "short": (20, 60, 0.6, 16),
}


@dataclass(frozen=True)
class Request:
    prompt: int  # tokens, including any shared prefix
    output: int
    prefix: int = 0  # leading prompt tokens shared with every request of the same group
    group: int = 0


class ServingInputError(ValueError):
    pass


def synthetic(dist: str, n: int, max_len: int, seed: int = 0) -> list[Request]:
    """Lognormal prompt and output lengths (medians and sigma in DISTRIBUTIONS), clipped so that
    prompt + output ≤ max_len; every request starts with the same system prompt (group 0)."""
    if dist not in DISTRIBUTIONS:
        raise ServingInputError(f"unknown --dist {dist!r}; expected one of {', '.join(DISTRIBUTIONS)}")
    p_med, o_med, sigma, shared = DISTRIBUTIONS[dist]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p = max(shared + 1, min(max_len // 2, round(p_med * math.exp(rng.gauss(0, sigma)))))
        o = max(1, min(max_len - p, round(o_med * math.exp(rng.gauss(0, sigma)))))
        out.append(Request(p, o, shared, 0))
    return out


def from_csv(path: Path, max_len: int) -> list[Request]:
    """Columns prompt_tokens, output_tokens, optional prefix_tokens and prefix_group."""
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError as e:
        raise ServingInputError(f"--requests {path}: {e}") from None
    if not rows or not {"prompt_tokens", "output_tokens"} <= set(rows[0]):
        raise ServingInputError(f"--requests {path}: needs columns prompt_tokens and output_tokens")
    reqs = []
    for i, r in enumerate(rows, start=2):
        try:
            p, o = int(r["prompt_tokens"]), int(r["output_tokens"])
            pre, grp = int(r.get("prefix_tokens") or 0), int(r.get("prefix_group") or 0)
        except ValueError:
            raise ServingInputError(f"--requests {path}, line {i}: lengths must be integers") from None
        if p < 1 or o < 1 or p + o > max_len or not 0 <= pre <= p:
            raise ServingInputError(f"--requests {path}, line {i}: need 1 ≤ prompt, 1 ≤ output, prompt + output ≤ "
                                    f"max_len={max_len}, 0 ≤ prefix ≤ prompt; got {p}, {o}, prefix {pre}")
        reqs.append(Request(p, o, pre, grp))
    return reqs


@dataclass
class _Running:
    req: Request
    done: int = 0  # output tokens generated so far

    @property
    def length(self) -> int:
        return self.req.prompt + self.done


@dataclass
class Result:
    policy: str
    steps: int
    real_share: float  # time-averaged share of reserved slots holding real tokens
    max_batch: int
    preemptions: int
    timeline: list = field(default_factory=list)  # (step, reserved slots, real tokens, running)

    @property
    def waste(self) -> float:
        return 1 - self.real_share


def _slots(policy: str, running: list[_Running], bs: int, max_len: int) -> tuple[int, int]:
    """(reserved slots, real tokens stored) for the running set."""
    if policy == "contiguous":
        return len(running) * max_len, sum(r.length for r in running)
    blocks, real = 0, 0
    shared_groups: dict[int, int] = {}
    for r in running:
        shared = r.req.prefix // bs if policy == "paged+shared" else 0  # full prefix blocks only
        if shared:
            shared_groups[r.req.group] = max(shared_groups.get(r.req.group, 0), shared)
        blocks += -(-r.length // bs) - shared
        real += r.length - shared * bs
    blocks += sum(shared_groups.values())
    real += sum(n * bs for n in shared_groups.values())
    return blocks * bs, real


def simulate(requests: list[Request], policy: str, capacity_tokens: int, block_size: int, max_len: int,
             max_steps: int = 1_000_000) -> Result:
    if policy not in POLICIES:
        raise ServingInputError(f"unknown policy {policy!r}")
    queue, running = list(requests), []
    steps = preempt = max_batch = 0
    share_sum = share_n = 0.0
    timeline = []

    def fits(extra: list[_Running]) -> bool:
        return _slots(policy, running + extra, block_size, max_len)[0] <= capacity_tokens

    while (queue or running) and steps < max_steps:
        while queue and fits([_Running(queue[0], 1)]):  # admit: the prompt plus the first new token
            running.append(_Running(queue.pop(0)))
        if not running:
            raise ServingInputError(f"a request of {queue[0].prompt} prompt tokens does not fit the budget of "
                                    f"{capacity_tokens} token slots even alone")
        for r in running:
            r.done += 1
        while _slots(policy, running, block_size, max_len)[0] > capacity_tokens and len(running) > 1:
            victim = running.pop()  # the most recently admitted: it recomputes later
            queue.insert(0, victim.req)
            preempt += 1
        reserved, real = _slots(policy, running, block_size, max_len)
        share_sum += real / reserved
        share_n += 1
        max_batch = max(max_batch, len(running))
        timeline.append((steps, reserved, real, len(running)))
        running = [r for r in running if r.done < r.req.output]
        steps += 1
    return Result(policy, steps, share_sum / max(1, share_n), max_batch, preempt, timeline)


def run_all(requests, capacity_tokens, block_size, max_len) -> list[Result]:
    return [simulate(requests, p, capacity_tokens, block_size, max_len) for p in POLICIES]


def plot(results: list[Result], path, capacity_tokens: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for r in results:
        t = [x[0] for x in r.timeline]
        a.plot(t, [x[2] / x[1] for x in r.timeline], label=f"{r.policy} (mean {r.real_share:.0%})")
        b.plot(t, [x[3] for x in r.timeline], label=r.policy)
    a.set_xlabel("decode step")
    a.set_ylabel("reserved KV memory holding real tokens")
    a.set_ylim(0, 1.05)
    a.legend(fontsize=8)
    b.set_xlabel("decode step")
    b.set_ylabel("concurrent requests")
    b.legend(fontsize=8)
    fig.suptitle(f"serving under a budget of {capacity_tokens:,} token slots")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
