"""torch.distributed for every verb that shards its work: the process group a `torchrun` launch needs,
one refusal said by every rank, and a prompt set dealt over ranks.

    torchrun --nproc-per-node 2 -m attnroute heads --corpus data/python-docs-topics.jsonl
    torchrun --nproc-per-node 2 -m attnroute patch --prompts ioi

Under torchrun (WORLD_SIZE > 1) the reader starts the process group itself — nccl with each rank on
its LOCAL_RANK device where CUDA is available (nccl collectives need it), gloo otherwise — and
destroys it when the read ends. A group the caller started is used as it is and left running.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import torch

from ...errors import InputError
from .wire import gather


@contextlib.contextmanager
def process_group():
    """(rank, world) inside; starts and ends the group when launched by torchrun and none is running."""
    dist = torch.distributed
    started = False
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and dist.is_available() and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        started = True
    try:
        yield rank_world()
    finally:
        if started:
            dist.destroy_process_group()


def rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def agree(world: int, fn):
    """``fn()`` on every rank; when it refuses on any rank, every rank refuses with the same line (the
    lowest failing rank's), so no rank goes on to read its shard and wait for a partner that left."""
    mine = None
    try:
        result = fn()
    except InputError as e:
        mine, result = e, None
    if world == 1:
        if mine is not None:
            raise mine
        return result
    said = gather(None if mine is None else (str(mine), mine.field), world)
    first = next(((r, s) for r, s in enumerate(said) if s is not None), None)
    if first is not None:
        rank, (message, field) = first
        raise InputError(f"rank {rank}: {message}", field=field)  # the same line on every rank
    return result


class Shard:
    """Prompts dealt round-robin over ranks (prompt i to rank i mod world); ``merge`` gathers per-prompt
    arrays so that every rank holds the whole [..., n] array, the same on every rank."""

    def __init__(self, n: int, rank: int, world: int):
        self.n, self.rank, self.world = n, rank, world
        self.rows = list(range(rank, n, world))  # this rank's prompts, as indices of the whole set

    def merge(self, local: np.ndarray) -> np.ndarray:
        """[..., n] arrays with NaN outside this rank's prompts -> the whole array, the same on every rank."""
        if self.world == 1:
            return local
        parts = gather(np.asarray(local), self.world)
        out = np.full_like(parts[0], np.nan, dtype=np.float64)
        for r, part in enumerate(parts):
            out[..., r :: self.world] = part[..., r :: self.world]
        return out

    def merge_max(self, values: list[float]) -> list[float]:
        """Every rank's values, concatenated (for a worst case over all prompts)."""
        if self.world == 1:
            return list(values) or [float("nan")]
        parts = gather([float(v) for v in values], self.world)
        return [v for p in parts for v in p] or [float("nan")]

    def gather(self, values: list) -> list:
        """Every rank's list of objects, concatenated in rank order (the same on every rank)."""
        if self.world == 1:
            return list(values)
        parts = gather(list(values), self.world)
        return [v for p in parts for v in p]


__all__ = ["Shard", "agree", "process_group", "rank_world"]
