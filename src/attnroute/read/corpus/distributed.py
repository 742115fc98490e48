"""torch.distributed for a corpus read: the process group a `torchrun` launch needs, and the merge.

    torchrun --nproc-per-node 2 -m attnroute heads --corpus data/python-docs-topics.jsonl

Under torchrun (WORLD_SIZE > 1) the reader starts the process group itself — nccl with each rank on
its LOCAL_RANK device where CUDA is available (nccl collectives need it), gloo otherwise — and
destroys it when the read ends. A group the caller started is used as it is and left running.
"""

from __future__ import annotations

import contextlib
import os

import torch

from ...errors import InputError
from .accumulator import Accumulator


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
    said = [None] * world
    torch.distributed.all_gather_object(said, None if mine is None else (str(mine), mine.field))
    first = next(((r, s) for r, s in enumerate(said) if s is not None), None)
    if first is not None:
        rank, (message, field) = first
        raise InputError(f"rank {rank}: {message}", field=field)  # the same line on every rank
    return result


def merge_ranks(acc: Accumulator, world: int) -> Accumulator:
    """Gather every rank's accumulator and merge them in rank order (the same on every rank)."""
    if world == 1:
        return acc
    states = [None] * world
    torch.distributed.all_gather_object(states, dict(acc.state()))
    merged = Accumulator.from_state(states[0])
    for s in states[1:]:
        merged.merge(Accumulator.from_state(s))
    return merged


__all__ = ["agree", "merge_ranks", "process_group", "rank_world"]
