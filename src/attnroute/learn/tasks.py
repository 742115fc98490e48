"""Synthetic routing tasks: batches of inputs, targets and the rows each statistic is read on.

Every task is next-position prediction on a causal LM: row t of the logits predicts
``targets[:, t]``, and only rows with ``loss_rows[:, t]`` True count in the loss. All randomness
comes from a torch.Generator, so a seed gives the same batches on every run.

The repeat task (induction), one example, T = 24, segment S = 5 at a = 3, repeated at b = 12:

    position   0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 ...
    token      . . . A B C D E . .  .  .  A  B  C  D  E  . ...
    first rows       ^ ^ ^ ^               (predict B..E the first time: unpredictable)
    repeat rows                            ^  ^  ^  ^    (predict B..E again: look back)

A row t in the repeat sees token x_t = A, must find the earlier A (at a), and read the token
after it (a + 1) - the induction route. The first token of the repeat (A at b) is never a
target of either region: nothing announces where the repeat starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..engine import InputError


@dataclass
class Batch:
    inputs: torch.Tensor  # (B, T) token ids
    targets: torch.Tensor  # (B, T) the id row t must predict
    loss_rows: torch.Tensor  # (B, T) bool: rows the training loss reads
    regions: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (B, T) bool rows
    weights: torch.Tensor | None = None  # (B, T) float row weights of the loss; None = loss_rows equally

    def row_weights(self) -> torch.Tensor:
        return self.loss_rows.float() if self.weights is None else self.weights

    def take(self, rows: slice) -> Batch:
        """The same batch cut to some examples (``rows`` slices the batch dimension)."""
        return Batch(
            self.inputs[rows],
            self.targets[rows],
            self.loss_rows[rows],
            {k: v[rows] for k, v in self.regions.items()},
            None if self.weights is None else self.weights[rows],
        )


@dataclass(frozen=True)
class RepeatTask:
    """Random tokens in which a segment of random length S ∈ [min_len, max_len] appears twice.

    Per-example offset (default): the first copy starts anywhere, the second anywhere after it,
    so only content says where to look. ``fixed_offset``: both copies start at the same
    positions in every example (a = start, b = start + offset), so absolute positions suffice.
    The training loss reads every row (plain language modelling); the regions "first" and
    "repeat" say where the two losses (first occurrence, repeat) are read.
    """

    vocab: int = 64
    length: int = 64
    min_len: int = 8
    max_len: int = 20
    fixed_offset: int | None = None  # distance b − a when fixed
    fixed_start: int = 0

    def __post_init__(self):
        if not 2 <= self.min_len <= self.max_len:
            raise InputError(f"segment lengths need 2 <= min_len <= max_len, got {self.min_len}..{self.max_len}")
        span = self.fixed_start + self.fixed_offset + self.max_len if self.fixed_offset else 2 * self.max_len
        if span > self.length:
            raise InputError(
                f"a segment of up to {self.max_len} tokens repeated does not fit in {self.length} "
                f"positions (needs {span}); lower max_len or raise length"
            )
        if self.fixed_offset is not None and self.fixed_offset < self.max_len:
            raise InputError(
                f"fixed_offset={self.fixed_offset} must be at least max_len={self.max_len} (copies overlap)"
            )

    def sample(self, batch: int, g: torch.Generator) -> Batch:
        B, T = batch, self.length
        x = torch.randint(0, self.vocab, (B, T + 1), generator=g)  # one extra: the last row's target
        S = torch.randint(self.min_len, self.max_len + 1, (B,), generator=g)
        if self.fixed_offset is not None:
            a = torch.full((B,), self.fixed_start)
            b = a + self.fixed_offset
        else:
            a = (torch.rand(B, generator=g) * (T - 2 * S + 1)).long()  # room for both copies
            b = a + S + (torch.rand(B, generator=g) * (T - a - 2 * S + 1)).long()
        pos = torch.arange(T + 1)  # (T+1,)
        src = pos[None] - b[:, None] + a[:, None]  # (B, T+1): where position p copies from
        in_repeat = (pos[None] >= b[:, None]) & (pos[None] < (b + S)[:, None])  # (B, T+1)
        x = torch.where(in_repeat, x.gather(1, src.clamp(0, T)), x)
        rows = pos[None, :T]  # row t predicts token t + 1
        first = (rows >= a[:, None]) & (rows < (a + S - 1)[:, None])  # predicts tokens a+1 … a+S−1
        repeat = (rows >= b[:, None]) & (rows < (b + S - 1)[:, None])  # predicts tokens b+1 … b+S−1
        return Batch(x[:, :T], x[:, 1:], torch.ones(B, T, dtype=torch.bool), {"first": first, "repeat": repeat})


@dataclass(frozen=True)
class LookupTask:
    """Route to the previous token, then transform: row t predicts f(x_{t−1}, x_t).

    kind="permutation": f = π(x_{t−1}) for a fixed random permutation π - a linear map on one-hot
        tokens, so an attention head's OV circuit can learn it (routing alone suffices);
    kind="table": f = table[x_{t−1}, x_t] for a fixed random vocab × vocab table - a function of
        the pair that no sum of per-token terms can express, so it needs a position-wise
        nonlinearity after the route (a feed-forward layer).
    Every row from 1 on counts in the loss.
    """

    vocab: int = 16
    length: int = 32
    kind: str = "table"
    seed: int = 1234  # fixes π and the table (not the batches)

    def __post_init__(self):
        if self.kind not in ("permutation", "table"):
            raise InputError(f"kind must be 'permutation' or 'table', got {self.kind!r}")

    def rule(self) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed)
        if self.kind == "permutation":
            return torch.randperm(self.vocab, generator=g)  # (V,)
        return torch.randint(0, self.vocab, (self.vocab, self.vocab), generator=g)  # (V, V)

    def sample(self, batch: int, g: torch.Generator) -> Batch:
        x = torch.randint(0, self.vocab, (batch, self.length), generator=g)  # (B, T)
        prev = torch.cat([x[:, :1], x[:, :-1]], dim=1)  # (B, T): x_{t−1} (row 0 reads itself; not scored)
        rule = self.rule()
        y = rule[prev] if self.kind == "permutation" else rule[prev, x]
        rows = torch.ones_like(x, dtype=torch.bool)
        rows[:, 0] = False
        return Batch(x, y, rows, {"all": rows})


# --------------------------------------------------------------------------- routing mixture (learn pruning)

TASK_TOKENS = ("copy", "previous", "induction")  # ids vocab−3, vocab−2, vocab−1 announce the task


@dataclass(frozen=True)
class MixtureTask:
    """Each example starts with a task token, then random tokens; one of three routes solves it.

    copy       the first half is repeated verbatim in the second half; rows in the second half
               predict the next token of the copy (a route at a fixed distance: T/2 − 1 back)
    previous   every row t ≥ 2 predicts x_{t−1} (a route one position back)
    induction  a random-length segment repeats at a random offset; repeat rows predict the next
               token (the content route: find the earlier copy, read what followed)
    Rows outside each task's scored region are not in the loss. Regions name the task; each
    example carries equal weight in the loss (``weights``).
    """

    vocab: int = 48  # the last 3 ids are task tokens
    length: int = 48
    seed: int = 0

    def sample(self, batch: int, g: torch.Generator) -> Batch:
        V, T = self.vocab - len(TASK_TOKENS), self.length
        kind = torch.randint(0, 3, (batch,), generator=g)  # (B,)
        inputs = torch.empty(batch, T, dtype=torch.long)
        targets = torch.zeros(batch, T, dtype=torch.long)
        rows = torch.zeros(batch, T, dtype=torch.bool)
        body = T - 1
        # copy: x[1 : 1+h] repeated at 1+h; row t in the second copy predicts x[t+1]
        h = body // 2
        first = torch.randint(0, V, (batch, h), generator=g)
        copy_x = torch.cat([first, first, torch.randint(0, V, (batch, body - 2 * h), generator=g)], 1)  # (B, body)
        # previous: random body; row t ≥ 2 predicts x_{t−1}
        prev_x = torch.randint(0, V, (batch, body), generator=g)
        # induction: RepeatTask on the body
        rep = RepeatTask(vocab=V, length=body, min_len=8, max_len=body // 2).sample(batch, g)
        for i in range(batch):
            k = int(kind[i])
            inputs[i, 0] = self.vocab - len(TASK_TOKENS) + k
            if k == 0:
                inputs[i, 1:] = copy_x[i]
                targets[i, :-1] = inputs[i, 1:]
                rows[i, 1 + h : 2 * h] = True  # rows 1+h … 2h predict the copy's tokens 2 … h
            elif k == 1:
                inputs[i, 1:] = prev_x[i]
                targets[i, 1:] = inputs[i, :-1]
                rows[i, 2:] = True
            else:
                inputs[i, 1:] = rep.inputs[i]
                targets[i, 1:] = rep.targets[i]
                rows[i, 1:] = rep.regions["repeat"][i]
        regions = {name: rows & (kind == k)[:, None] for k, name in enumerate(TASK_TOKENS)}
        # every example weighs the same whatever its number of scored rows, so the induction
        # task (fewest rows) is not drowned by the previous-token task (most rows)
        weights = rows.float() / rows.sum(1, keepdim=True).clamp_min(1)
        return Batch(inputs, targets, rows, regions, weights)
