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

from ..engine import InputError
from ..settings import SimulateSettings

POLICIES = ("contiguous", "paged", "paged+shared")
DISTRIBUTIONS = {
    # name: (prompt median, output median, lognormal sigma, shared system-prompt tokens)
    "chat": (160, 200, 0.8, 64),
    "short": (20, 60, 0.6, 16),
}


@dataclass(frozen=True)
class ServeRequest:
    prompt: int  # tokens, including any shared prefix
    output: int
    prefix: int = 0  # leading prompt tokens shared with every request of the same group
    group: int = 0


class ServingInputError(InputError):
    """A request stream or simulation setting that cannot be served."""


def synthetic(dist: str, n: int, max_len: int, seed: int = 0) -> list[ServeRequest]:
    """Lognormal prompt and output lengths (medians and sigma in DISTRIBUTIONS), clipped so that
    prompt + output ≤ max_len; every request starts with the same system prompt (group 0)."""
    if dist not in DISTRIBUTIONS:
        raise ServingInputError(f"unknown dist {dist!r}; expected one of {', '.join(DISTRIBUTIONS)}", field="dist")
    p_med, o_med, sigma, shared = DISTRIBUTIONS[dist]
    if max_len < 2 * (shared + 1):  # every request carries the shared prompt plus its own tokens
        raise ServingInputError(
            f"max_len must be at least {2 * (shared + 1)} for the {dist!r} stream (its shared "
            f"system prompt is {shared} tokens), got {max_len}",
            field="max_len",
        )
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p = max(shared + 1, min(max_len // 2, round(p_med * math.exp(rng.gauss(0, sigma)))))
        o = max(1, min(max_len - p, round(o_med * math.exp(rng.gauss(0, sigma)))))
        out.append(ServeRequest(p, o, shared, 0))
    return out


def from_csv(path: Path, max_len: int) -> list[ServeRequest]:
    """Columns prompt_tokens, output_tokens, optional prefix_tokens and prefix_group."""
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError as e:
        raise ServingInputError(f"requests {path}: {e}", field="requests") from None
    if not rows or not {"prompt_tokens", "output_tokens"} <= set(rows[0]):
        raise ServingInputError(f"requests {path}: needs columns prompt_tokens and output_tokens", field="requests")
    reqs = []
    for i, r in enumerate(rows, start=2):
        try:
            p, o = int(r["prompt_tokens"]), int(r["output_tokens"])
            pre, grp = int(r.get("prefix_tokens") or 0), int(r.get("prefix_group") or 0)
        except (TypeError, ValueError):  # a short row gives None for its missing fields
            raise ServingInputError(f"requests {path}, line {i}: lengths must be integers", field="requests") from None
        if p < 1 or o < 1 or p + o > max_len or not 0 <= pre <= p:
            raise ServingInputError(
                f"requests {path}, line {i}: need 1 ≤ prompt, 1 ≤ output, prompt + output ≤ "
                f"max_len={max_len}, 0 ≤ prefix ≤ prompt; got {p}, {o}, prefix {pre}"
            )
        reqs.append(ServeRequest(p, o, pre, grp))
    return reqs


@dataclass
class _Running:
    req: ServeRequest
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


def simulate(
    requests: list[ServeRequest],
    policy: str,
    capacity_tokens: int,
    block_size: int,
    max_len: int,
    max_steps: int = 1_000_000,
    progress=None,
) -> Result:
    if policy not in POLICIES:
        raise ServingInputError(f"unknown policy {policy!r}")
    too_long = [r for r in requests if r.prompt + r.output > max_len]
    if too_long:
        r = too_long[0]
        raise ServingInputError(
            f"{len(too_long)} request(s) longer than max_len={max_len} (e.g. {r.prompt} prompt + "
            f"{r.output} output tokens): a contiguous reservation could not hold them",
            field="max_len",
        )
    queue, running = list(requests), []
    steps = preempt = max_batch = 0
    share_sum = share_n = 0.0
    timeline = []

    def fits(extra: list[_Running]) -> bool:
        return _slots(policy, running + extra, block_size, max_len)[0] <= capacity_tokens

    while (queue or running) and steps < max_steps:
        if progress and steps % 1000 == 0:
            progress(f"{policy}: step {steps:,}, {len(queue):,} queued, {len(running):,} running")
        while queue and fits([_Running(queue[0], 1)]):  # admit: the prompt plus the first new token
            running.append(_Running(queue.pop(0)))
        if not running:
            raise ServingInputError(
                f"a request of {queue[0].prompt} prompt tokens does not fit the budget of "
                f"{capacity_tokens} token slots even alone"
            )
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
    if queue or running:
        raise ServingInputError(
            f"the {policy} run hit the cap of {max_steps:,} steps with {len(queue) + len(running)} "
            "requests unserved; its figures would not compare with finished runs"
        )
    return Result(policy, steps, share_sum / max(1, share_n), max_batch, preempt, timeline)


def run_all(requests, capacity_tokens, block_size, max_len, progress=None) -> list[Result]:
    return [simulate(requests, p, capacity_tokens, block_size, max_len, progress=progress) for p in POLICIES]


def validate_settings(budget_gb: float, block_size: int, max_len: int, n: int = 1) -> None:
    """The simulation's knobs, each named when it is out of range."""
    for name, v, lo in (
        ("budget_gb", budget_gb, 0),
        ("block_size", block_size, 1),
        ("max_len", max_len, 2),
        ("n", n, 1),
    ):
        if not v >= lo or (name == "budget_gb" and (v == 0 or not math.isfinite(v))):
            raise ServingInputError(
                f"{name} must be a positive finite number (at least {lo or 'above 0'}), got {v}", field=name
            )


def serve(
    requests: list[ServeRequest],
    bytes_per_token: int,
    budget_gb: float,
    block_size: int,
    max_len: int,
    progress=None,
) -> tuple[dict, list[Result]]:
    """Every policy on one stream under a KV budget of ``budget_gb`` GB (10⁹ bytes).

    Returns the figures as a dict (the JSON of `attnroute cost simulate`, less the model and the
    stream's name) and the per-policy results with their timelines.
    """
    validate_settings(budget_gb, block_size, max_len)
    capacity = int(budget_gb * 1e9) // bytes_per_token
    results = run_all(requests, capacity, block_size, max_len, progress)
    data = {
        "bytes_per_token": bytes_per_token,
        "budget_bytes": int(budget_gb * 1e9),
        "capacity_tokens": capacity,
        "block_size": block_size,
        "max_len": max_len,
        "policies": [
            {
                "policy": r.policy,
                "real_share": r.real_share,
                "waste": r.waste,
                "max_batch": r.max_batch,
                "steps": r.steps,
                "preemptions": r.preemptions,
            }
            for r in results
        ],
    }
    return data, results


def serve_stream(settings: SimulateSettings, progress=None) -> tuple[dict, list[Result]]:
    """`attnroute cost simulate`: the stream (a CSV or synthetic lengths) served under the model's KV bytes
    per token. Returns (the JSON's figures, the per-policy results with their timelines)."""
    from .footprint import kv_spec

    s = settings
    validate_settings(s.budget_gb, s.block_size, s.max_len, s.n)
    spec, _, what = kv_spec(s.kv)
    reqs = from_csv(Path(s.requests), s.max_len) if s.requests else synthetic(s.dist, s.n, s.max_len, s.seed)
    figures, results = serve(reqs, spec.bytes_per_token, s.budget_gb, s.block_size, s.max_len, progress=progress)
    source = s.requests or f"{s.n} synthetic '{s.dist}' requests (seed {s.seed})"
    return {"model": what, **figures, "requests": source}, results


__all__ = [
    "serve_stream",
    "DISTRIBUTIONS",
    "POLICIES",
    "Result",
    "ServeRequest",
    "ServingInputError",
    "from_csv",
    "run_all",
    "serve",
    "simulate",
    "synthetic",
    "validate_settings",
]
