"""The runs behind a patching experiment, for one group of same-length prompts.

    run = PairRun(loaded, group, metric, direction)   # two recorded forwards: clean and corrupt
    run.measure([component, ...])                      # exact: M with each component patched, [k, n]
    run.gradients()                                    # one forward + backward on the base run

Denoising runs the corrupt prompts and patches clean activations in; noising the reverse. The base
run is the one being edited, the source the one activations come from. Exact patches share forwards:
the batch is repeated once per component (copy c patches component c) and the layers before the
patched one answer with the base run's recorded block outputs (they cannot change) — the restart is
checked once against the full forward and not used if it differs.
"""

from __future__ import annotations

import torch

from ..adapter import routed
from ..effects import layer_stack, restart_check, run_from
from ..ground.batches import batch_of, logit_copies, metric_input, no_cache, output_kwargs, references
from ..ground.budget import scaled
from ..ground.copies import metric_of_copies, repeat_batch
from ..ground.pool import Recorded
from ..ground.prompts import Group
from ..hooks import recorded
from .direct import FinalRecorder, direct_effects
from .qkfix import qk_estimates
from .sites import Component, PatchCopies, Recorder, Tap, estimate_grid

TOKEN_BUDGET = 8192  # tokens per exact forward (copies × prompts × length): bounded memory on 2 cores


class PairRun(Recorded):
    SHARED = ("loaded", "metric", "blocks")  # a pool counts the rest as this run's (ground/pool.py)

    def __init__(self, loaded, group: Group, metric, direction: str):
        self.loaded, self.group, self.metric, self.direction = loaded, group, metric, direction
        self.n = len(group.rows)
        # no KV cache: nothing here decodes, and each forward built one (a 7B model's, at 4,096 tokens: 0.5 GiB)
        self.kwargs = {**output_kwargs(loaded, metric), **no_cache(loaded)}
        self.fields = {"answer": group.answer, "wrong": group.wrong}
        clean_out, self.clean_rec, clean_blocks, self.clean_final = self._record(group.clean)
        self.fields.update(references(loaded, clean_out, self.batch(group.clean)))
        self.m_clean = self._metric(clean_out, group.clean)
        corrupt_out, self.corrupt_rec, corrupt_blocks, self.corrupt_final = self._record(group.corrupt)
        self.m_corrupt = self._metric(corrupt_out, group.corrupt)
        denoise = direction == "denoising"
        self.base_ids = group.corrupt if denoise else group.clean
        self.base_blocks = corrupt_blocks if denoise else clean_blocks
        self.source = self.clean_rec if denoise else self.corrupt_rec
        self.m_base = self.m_corrupt if denoise else self.m_clean
        # an encoder–decoder's base-run encoding [n, S, d]: what a patch of a decoder layer's heads reads
        self.base_encoding = getattr(corrupt_out if denoise else clean_out, "encoder_last_hidden_state", None)
        self.blocks = layer_stack(loaded)
        self.shortcut = self._check_shortcut()

    # ---------------------------------------------------------------- forwards

    def batch(self, ids: torch.Tensor) -> dict:
        return batch_of(self.loaded, ids)

    def _metric(self, outputs, ids: torch.Tensor, copies: int = 1) -> torch.Tensor:
        """The metric per prompt of ``copies`` stacked copies of the group, as [copies · n]."""
        return self._metric_value(outputs, ids, copies).detach().float()

    def _metric_value(self, outputs, ids: torch.Tensor, copies: int = 1) -> torch.Tensor:
        """The metric on ``outputs`` of ``copies`` stacked copies of ``ids``, its graph kept (the estimate
        differentiates it): logits, or an encoder's pooled embedding, with the answer fields tiled."""
        batch = self.batch(ids.repeat(copies, 1))
        return metric_of_copies(self.metric, metric_input(self.loaded, outputs, batch), batch, self.fields, self.n)

    @torch.no_grad()
    def _record(self, ids: torch.Tensor):
        recs = [Recorder(layer) for layer in range(self.loaded.n_layers)]
        with (
            recorded(layer_stack(self.loaded) or []) as stored,
            FinalRecorder(self.loaded) as final,
            routed(self.loaded, interventions=recs, impl="eager"),
        ):
            out = self.loaded.model(**self.batch(ids), **self.kwargs)
        return out, recs, stored, final

    def direct(self) -> dict:
        """Direct effects of every head on the clean and the corrupt runs (logit-diff only)."""
        g = self.group
        return {
            side: direct_effects(self.loaded, rec, final, g.answer, g.wrong, m)
            for side, rec, final, m in (
                ("clean", self.clean_rec, self.clean_final, self.m_clean),
                ("corrupt", self.corrupt_rec, self.corrupt_final, self.m_corrupt),
            )
        }

    def _check_shortcut(self) -> dict:
        value = lambda out: self._metric(out, self.base_ids)  # noqa: E731
        check = restart_check(
            self.loaded, self.base_blocks, self.batch(self.base_ids), value, self.m_base, self.blocks, **self.kwargs
        )
        if self.base_encoding is not None:
            check["decoder"] = "a decoder layer's patches read the base run's encoding: the encoder is not rerun"
        return check

    def copies(self) -> int:
        by_tokens = scaled(TOKEN_BUDGET) // max(1, self.n * self.group.length)
        return max(1, min(by_tokens, logit_copies(self.loaded, self.n, self.group.length, self.kwargs)))

    @torch.no_grad()
    def measure(self, comps: list[Component]) -> torch.Tensor:
        """The metric with each component patched, [len(comps), n]; components of one layer at a time."""
        out = torch.empty(len(comps), self.n)
        by_layer: dict[int, list[int]] = {}
        for i, c in enumerate(comps):
            by_layer.setdefault(c.layer, []).append(i)
        k = self.copies()
        for layer, idx in sorted(by_layer.items()):
            for j in range(0, len(idx), k):
                chunk = idx[j : j + k]
                iv = PatchCopies(layer, [comps[i] for i in chunk], self.n, self.source[layer])
                rep = repeat_batch(self.batch(self.base_ids), len(chunk))
                if self.base_encoding is not None and self.loaded.mode(layer) != "encoder":
                    # a patch in the decoder cannot change the encoder: its output is the base run's, not rerun
                    rep["encoder_outputs"] = (self.base_encoding.repeat(len(chunk), 1, 1),)
                start = layer if self.shortcut["used"] else 0
                res = run_from(
                    self.loaded,
                    start,
                    self.base_blocks,
                    rep,
                    interventions=[iv],
                    copies=len(chunk),
                    blocks=self.blocks,
                    **self.kwargs,
                )
                out[chunk] = self._metric(res, self.base_ids, len(chunk)).view(len(chunk), self.n)
        return out

    def gradients(self, sites, per_position: bool = False) -> dict[tuple, torch.Tensor]:
        """One forward and one backward on the base run: the estimate grid [n, units, T] of every
        (layer, site) — the change of M when the source's activation replaces the base's, linear for the
        head outputs and values, and for queries and keys with the softmax recomputed (qkfix.py: AtP*'s
        QK fix). Keys also give (layer, "k", "total") [n, Hkv]: a whole key patched, which is not the sum
        over its positions."""
        taps = [Tap(layer) for layer in range(self.loaded.n_layers)]
        ctx: dict[int, tuple] = {}
        on_attend = lambda layer, mask, args: ctx.__setitem__(layer, (mask, args))  # noqa: E731
        with torch.enable_grad(), routed(self.loaded, interventions=taps, impl="eager", on_attend=[on_attend]):
            outputs = self.loaded.model(**self.batch(self.base_ids), **self.kwargs)
            total = self._metric_grad(outputs).sum()
            leaves = [t.leaves[name] for t in taps for name in ("q", "k", "v", "out")]
            grads = torch.autograd.grad(total, leaves, allow_unused=True)
        for leaf, g in zip(leaves, grads):
            leaf.grad = torch.zeros_like(leaf) if g is None else g
        out = {}
        for t in taps:
            linear = [site for site in sites if site not in ("q", "k")]
            out.update({(t.layer, site): estimate_grid(t, self.source[t.layer], site).detach() for site in linear})
            if "q" in sites or "k" in sites:
                fixed = qk_estimates(t, self.source[t.layer], *ctx[t.layer], per_position and "k" in sites)
                out[(t.layer, "q")], out[(t.layer, "k", "total")] = fixed["q"], fixed["k_total"]
                if "k" in fixed:
                    out[(t.layer, "k")] = fixed["k"]
        return out

    def _metric_grad(self, outputs) -> torch.Tensor:
        return self._metric_value(outputs, self.base_ids)


__all__ = ["PairRun", "TOKEN_BUDGET"]
