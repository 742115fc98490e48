"""Mean ablation's reference: every write and every read point averaged over the clean prompts of one length.

``--ablation mean`` gives each edge outside a circuit its sender's mean write, position by position, over
the clean prompts (Wang et al. 2211.00593 ablate to the mean over a reference set; MIB reports it beside
the corrupt run). The mean has to be over *every* prompt of that length: the prompts are cut into runs
(``RUN_TOKENS``) and dealt over torchrun's ranks, and a mean taken run by run — as it once was — made the
circuits depend on how the prompts were cut and on the number of ranks, and left a run of one prompt with
nothing ablated at all. Here one pass over the runs sums the clean writes in float64, the ranks' sums are
added in rank order, and every run of a length reads the same means. A prompt alone at its length is
refused before the weights load (``check_lengths``): its mean would be its own clean run.
"""

from __future__ import annotations

import torch

from ...errors import InputError
from .stream import part_of, read_value, sender_writes


def check_lengths(groups, pairs) -> None:
    """Refused in one line: a prompt alone at its length has no mean to be ablated to but its own run."""
    alone = [g for g in groups if len(g.rows) < 2]
    if alone:
        rows = ", ".join(str(pairs[g.rows[0]].row) for g in alone[:5])
        lengths = ", ".join(str(g.length) for g in alone[:5])
        raise InputError(
            f"ablation mean: the mean is taken position by position over the clean prompts of one length, and "
            f"prompt row {rows} is alone at its length ({lengths} tokens): its mean would be its own clean run; "
            "give two or more prompts of each length, or use --ablation corrupt",
            field="ablation",
        )


class GroupMeans:
    """{length: the mean clean write of every sender and the mean value at every read point}, each [1, T, d]
    in the dtype the runs record it in; filled once (``fill``) before the first circuit runs."""

    def __init__(self, layout, graph):
        self.layout, self.graph = layout, graph
        self.points = list(dict.fromkeys(graph.read_points))  # distinct read points, in graph order
        self.first = {p: graph.read_points.index(p) for p in self.points}  # a receiver reading each
        self.slot = {p: len(graph.senders) + i for i, p in enumerate(self.points)}  # its mean's place in a list
        self.means: dict[int, list[torch.Tensor]] = {}  # length -> [senders..., read points...]

    def fill(self, pool, shard, say) -> None:
        """One pass over ``pool``'s runs (this rank's prompts); every rank's run sums are then added in rank order."""
        say("stage", "mean ablation: every write averaged over the clean prompts of its length")
        local = []
        for i in range(len(pool)):
            run = pool.get(i)
            local.append((run.group.length, run.n, *self._sums(run.clean)))
            pool.done(i)
        totals: dict[int, tuple] = {}  # length -> (prompts, sums, dtypes)
        for length, n, add, dtypes in shard.gather(local):
            have = totals.get(length)
            totals[length] = (
                (n, add, dtypes) if have is None else (have[0] + n, [a + b for a, b in zip(have[1], add)], dtypes)
            )
        self.means = {
            length: [(x / n)[None].to(t) for x, t in zip(add, dtypes)] for length, (n, add, dtypes) in totals.items()
        }

    def _sums(self, rec: dict) -> tuple[list[torch.Tensor], list[torch.dtype]]:
        """Σ over one run's prompts of each sender's write and each read point's value, in float64, and the
        dtype each was recorded in."""
        found: dict[int, torch.Tensor] = {}
        for part in dict.fromkeys(part_of(x) for x in self.graph.senders):
            found.update(sender_writes(self.layout, self.graph, rec, *part))
        values = [found[s] for s in range(len(self.graph.senders))]
        values += [read_value(self.layout, rec, self.graph.receivers[self.first[p]]) for p in self.points]
        return [x.double().sum(0) for x in values], [x.dtype for x in values]

    def write(self, length: int, sender: int) -> torch.Tensor:
        """The mean write of ``sender`` over the clean prompts of ``length`` tokens, [1, T, d]."""
        return self.means[length][sender]

    def read(self, length: int, receiver: int) -> torch.Tensor:
        """The mean of what ``receiver`` reads over those prompts, [1, T, d]."""
        return self.means[length][self.slot[self.graph.read_points[receiver]]]


__all__ = ["GroupMeans", "check_lengths"]
