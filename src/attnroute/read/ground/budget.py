"""Memory bounded on request: ``max_memory`` (``--max-memory SIZE``) scales every working budget of a verb
and the peak is measured against it.

    with Bound(3 << 30, say) as bound:                 # Study does this once the model is loaded (settings: 3G)
        step = scaled(STACK_BYTES) // sender_bytes     # every batching budget read through scaled()
        bound.report()  # {"cap", "resident", "scale", "peak", "kept"}: what the result says

A verb's peak is the process's resident memory with the model loaded plus what its work holds: a part
that no batch size changes (the result's arrays, one forward's activations, the allocator's slack:
FIXED_WORKING) and what the batches hold, set by byte and token budgets (pool.RUN_TOKENS and KEEP_BYTES,
the circuit's STREAM_BYTES, the QK fix's STACK_BYTES, patch's TOKEN_BUDGET, …) — about DEFAULT_WORKING at
their defaults. Measured on SmolLM2's IOI circuit: 2.50 GiB over what was resident at full batches, 1.57
GiB at 0.52 of them: 0.56 GiB fixed, 1.94 GiB a full scale. With a cap, each budget is multiplied by

    scale = min(1, (cap − resident − FIXED_WORKING) / DEFAULT_WORKING)

so the batches shrink together. A model held in bf16 or fp16 has its batches at ``dtype_factor`` (1/2) with
no cap, and at most that under one: they hold the tokens a float32 model's hold, in half the bytes. Only
budgets that cut work into batches are scaled — never one that chooses a method (the QK fix's QK_BUDGET):
the numbers are the same under any cap, the time longer. A cap that leaves less than MIN_SCALE of the
batches' share is refused before any work, with the figure that would do. The peak is then measured (Linux:
the kernel's high-water mark, reset when the verb starts) and said: ``kept`` False — the cap was passed — is
printed in the verdict, never hidden.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from pathlib import Path

import torch

from ...errors import InputError
from ...models.fit import gib  # sizes said one way, in the refusals here and in cost fit's table

DEFAULT_WORKING = 2 << 30  # what the default budgets let a verb's batches hold (measured: 1.94 GiB, IOI's circuit)
FIXED_WORKING = 3 << 28  # what a verb holds whatever its batches (measured: 0.56 GiB, IOI's circuit)
MIN_SCALE = 1 / 16  # below this the batches are one prompt, one copy: their own size no longer shrinks
_SCALE: ContextVar[float] = ContextVar("attnroute_memory_scale", default=1.0)


def scaled(budget: int) -> int:
    """A batching budget (bytes or tokens) under the cap in force: at least 1."""
    return max(1, int(budget * _SCALE.get()))


def resident() -> int | None:
    """This process's resident memory now (Linux /proc; None elsewhere)."""
    return _status("VmRSS")


def peak() -> int | None:
    """The process's resident high-water mark since the last reset_peak()."""
    return _status("VmHWM")


def reset_peak() -> bool:
    """Reset the kernel's high-water mark (Linux ≥ 4.0: "5" to clear_refs); False where it cannot be."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _status(key: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{key}:\s*(\d+)\s*kB", text, re.M)
    return None if m is None else int(m.group(1)) * 1024


@torch.no_grad()
def _touch(model) -> None:
    """Read one value of every page of the model's host weights, so that what is resident counts them: weights
    loaded from a file are mapped and paged in by the first forward (SmolLM2: 0.46 GiB resident after the load,
    1.0 GiB after a forward), and a cap weighed against the smaller figure was passed. Nothing is written."""
    for t in (*model.parameters(), *model.buffers()):
        if t.device.type == "cpu" and t.numel():
            flat = t.detach().reshape(-1)
            flat[:: max(1, 4096 // t.element_size())].sum()


def plan(cap: int, now: int) -> float:
    """The scale for a cap with ``now`` bytes resident, or a refusal naming the cap that would do."""
    working = cap - now - FIXED_WORKING
    least = MIN_SCALE * DEFAULT_WORKING
    if working < least:
        raise InputError(
            f"max_memory {gib(cap)} leaves {gib(max(0, cap - now))} beyond the {gib(now)} this process holds with the "
            f"model loaded, and the work needs about {gib(FIXED_WORKING + least)} at its smallest batches: give at "
            f"least {gib(now + FIXED_WORKING + least)} (or leave max_memory out)",
            field="max_memory",
        )
    return min(1.0, working / DEFAULT_WORKING)


class Bound:
    """The budgets scaled to a cap while entered; ``report()`` — what the result says — at any point: the cap,
    what was resident, the scale, the peak so far and whether it was kept. Without a cap: nothing scaled,
    nothing measured, report() {}. Refused up front where the cap cannot be met or memory cannot be read."""

    cap: int | None

    def __init__(self, cap: int | None, say=None, model=None):
        self.cap, self.say, self.model, self.memory, self._token = cap, say, model, {}, None

    def __enter__(self) -> Bound:
        factor = dtype_factor(self.model)
        if self.cap is None:
            if factor < 1:
                self._token = _SCALE.set(factor)
            return self
        if self.model is not None:
            _touch(self.model)
        now = resident()
        if now is None or not reset_peak():
            raise InputError(
                "max_memory needs the process's memory readable (Linux /proc): this system does not offer it; "
                "leave max_memory out",
                field="max_memory",
            )
        scale = min(factor, plan(self.cap, now))
        self.memory = {"cap": self.cap, "resident": now, "scale": scale}
        if self.say is not None and scale < 1:
            self.say("stage", f"memory: batches at {scale:.2f} of their default size to stay within {gib(self.cap)}")
        self._token = _SCALE.set(scale)
        return self

    def __exit__(self, *exc) -> None:
        if self._token is not None:
            _SCALE.reset(self._token)
            self._token = None

    def report(self) -> dict:
        if not self.memory:
            return {}
        top = peak()
        return {**self.memory, "peak": top, "kept": top is not None and top <= self.cap}


def dtype_factor(model) -> float:
    """The share of the default batches a model's dtype takes: its bytes an element over float32's (bf16 and
    fp16: 1/2; float32 and wider: 1). A bf16 model's batches hold the tokens a float32 model's hold, so the bytes
    they take halve with the weights' — budgets counted in bytes alone let bf16 batch twice the tokens in the same
    memory, and its peak stayed 0.7–0.8× float32's. The numbers do not change with the batches (as under a cap);
    the float32 parts (logits, gradient products) are then batched smaller, and take more passes."""
    if model is None:
        return 1.0
    from ...models.loaded import held_dtypes

    sizes = [d.itemsize for d in held_dtypes(model)]
    return min(1.0, max(sizes, default=4) / 4)


RUN_SHARE = 1 / 2  # of the batches' capped share, what one run's work may take (the kept runs: KEEP_BYTES, the rest)


def run_tokens(tokens: int, per_token: int | None, longest: int, cap: int | None) -> int:
    """Tokens of one run (prompts × length): ``tokens`` (RUN_TOKENS scaled), and at most what the batches' share
    holds at ``per_token`` bytes a token: uncapped, the whole DEFAULT_WORKING (a run of one prompt at least);
    under a cap, RUN_SHARE of the capped share — refused where not even one prompt of ``longest`` tokens fits,
    with the cap that would do. Uncapped, IOI's circuit runs (≤ 288 tokens) are whole; 144 IOI pairs made runs
    of up to 864 tokens whose estimate held about 5 GiB, and the whole command peaked at 5.73 GiB."""
    scale = _SCALE.get()
    if per_token is None:
        return tokens
    if scale >= 1 or cap is None:  # uncapped: the default share, at a bf16 model's dtype_factor
        return min(tokens, max(1, int(scale * DEFAULT_WORKING // per_token)))
    room = RUN_SHARE * scale * DEFAULT_WORKING
    if per_token * longest > room:
        need = cap + (per_token * longest - room) / RUN_SHARE
        raise InputError(
            f"max_memory {gib(cap)} leaves {gib(room)} for one run's work, and one prompt of {longest} tokens holds "
            f"about {gib(per_token * longest)}: give at least {gib(need)} (or shorter prompts)",
            field="max_memory",
        )
    return min(tokens, int(room // per_token))


def said(memory: dict | None) -> str | None:
    """The verdict's line when the cap was passed (None when kept, or without a cap)."""
    if not memory or memory.get("kept", True):
        return None
    return (
        f"memory: the peak was {gib(memory['peak'])}, past max_memory {gib(memory['cap'])} (batches at "
        f"{memory['scale']:.2f} of their size; {gib(memory['resident'])} resident before the work): this run "
        "holds more than its batches, so give a larger max_memory or fewer prompts"
    )


__all__ = [
    "DEFAULT_WORKING",
    "FIXED_WORKING",
    "MIN_SCALE",
    "Bound",
    "RUN_SHARE",
    "dtype_factor",
    "run_tokens",
    "peak",
    "plan",
    "reset_peak",
    "resident",
    "said",
    "scaled",
]
