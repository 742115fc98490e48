"""A receiver's gradient through its attention's projection, one head's columns of the weight at a time.

A q, k or v receiver's gradient at the point it reads is its cotangent — the metric's gradient at that
head's q, k or v, zero at every other head — taken back through the attention's own code: rotary, q/k
norms, reshapes, the projection. Taken back as one batched backward per receiver, the projection's
backward multiplies a [T, H·D] cotangent that is zero outside one head's D columns by the whole weight: H
times the work it needs (on SmolLM2 the receivers' backward cost as much as the model's own forward +
backward, per EAP-IG step). Here the backward stops at the projection's output — what follows it is
elementwise or per head, cheap — the columns a receiver's cotangent touches are read off that (nonzero
anywhere), and only those columns of the weight are multiplied. Exact: a dropped column's cotangent is zero.

    with linear_taps(module) as taps:
        q, k, v = replay(module, args, kwargs, hidden_states=n)       # n: a leaf, the projection's input
    g = head_vjp(q, n, cot [B, H, T, D], units, taps, memo, key)    # [r, *n.shape], one row per head in units

The structure is checked, not assumed, once per attention class and channel (``checked``): the receivers'
products must sum to one plain backward of their summed cotangent (which holds only if the projection reads
``n`` itself and nothing else carries ``n`` to q). Where it does not hold — a projection that is not a
Linear, a module that mixes its input otherwise — the plain batched backward gives the same numbers.
"""

from __future__ import annotations

import contextlib

import torch

from ...models.offload import param
from ..hooks import Hooks
from .stream import o_matrix  # any Linear's or Conv1D's weight as [out, in]


def _is_linear(m: torch.nn.Module) -> bool:
    return isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"  # transformers' Conv1D: GPT-2


@contextlib.contextmanager
def linear_taps(module: torch.nn.Module):
    """Every Linear call inside ``module`` while the block runs: [(linear, its input, its output)]."""
    taps: list = []
    with Hooks() as hooks:
        for m in module.modules():
            if _is_linear(m):
                hooks.after(m, lambda m, args, out: taps.append((m, args[0], out)))
        yield taps


def plain_vjp(y: torch.Tensor, x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """[k, *x.shape]: the vector–Jacobian products of y at x for each of k cotangents (batched through
    autograd's vmap; one backward at a time where an operation of the model does not batch)."""
    try:
        return torch.autograd.grad(y, x, grad_outputs=grad_out, retain_graph=True, is_grads_batched=True)[0]
    except RuntimeError:
        return torch.stack([torch.autograd.grad(y, x, grad_outputs=go, retain_graph=True)[0] for go in grad_out])


def head_vjp(y, n, cot: torch.Tensor, units: list[int], taps: list, memo: dict, key) -> torch.Tensor:
    """[r, *n.shape]: for each receiver's head u in ``units`` (axis 1 of y), the vector–Jacobian product at
    ``n`` of y with the cotangent ``cot`` [B, H, T, D] kept on head u alone (see the module docstring)."""
    lins = [(m, out) for m, inp, out in taps if inp is n]
    if memo.get(key) is False or not lins:
        return plain_vjp(y, n, _per_head(cot, units))
    cols = memo.get(key)
    if cols is None or not set(units) <= set(cols) or any(len(cols[u]) != len(lins) for u in units):
        return _probe(y, n, cot, units, lins, memo, key)
    at_outputs = torch.autograd.grad(y, [o for _, o in lins], _kept(cot, units), retain_graph=True, allow_unused=True)
    if not _within(at_outputs, [cols[u] for u in units]):  # reached a column the map does not hold: map again
        return _probe(y, n, cot, units, lins, memo, key)
    return _through_weights(lins, [list(at_outputs)] * len(units), [cols[u] for u in units], n)


def _kept(cot: torch.Tensor, units: list[int]) -> torch.Tensor:
    """The cotangent on the heads in ``units`` (axis 1), zero on the others: every receiver's at once."""
    mask = torch.zeros(cot.shape[1], dtype=cot.dtype)
    mask[units] = 1
    return cot * mask.view(1, -1, *([1] * (cot.dim() - 2)))


def _per_head(cot: torch.Tensor, units: list[int]) -> torch.Tensor:
    """[r, *cot.shape]: the cotangent kept on one head per row."""
    out = torch.zeros((len(units), *cot.shape), dtype=cot.dtype)
    for i, u in enumerate(units):
        out[i, :, u] = cot[:, u]
    return out


def _probe(y, n, cot, units, lins, memo: dict, key) -> torch.Tensor:
    """The products from each receiver's own backward to the projections' outputs, the columns each reaches
    recorded, and the structure checked: the columns of different heads must not overlap, and the products
    must sum to one plain backward of the summed cotangent. Else the plain backward, from now on."""
    grad_out = _per_head(cot, units)
    at_outputs = _batched_grad(y, [o for _, o in lins], grad_out)  # per projection: [r, B, T, out] or None
    reach = [
        [None if U is None else U[i].reshape(-1, U.shape[-1]).ne(0).any(0) for U in at_outputs]
        for i in range(len(units))
    ]
    cols = [[None if c is None else c.nonzero().flatten() for c in per] for per in reach]
    g = _through_weights(lins, [[None if U is None else U[i] for U in at_outputs] for i in range(len(units))], cols, n)
    ok = _disjoint(reach) and _sums_to_plain(y, n, grad_out, g)
    memo[key] = {**(memo.get(key) or {}), **dict(zip(units, cols, strict=True))} if ok else False
    return g if ok else plain_vjp(y, n, grad_out)


def _through_weights(lins, at_outputs: list[list], cols: list[list], n) -> torch.Tensor:
    """[r, *n.shape]: Σ over projections of U[..., cols] @ W[cols] for each receiver (its own U and columns);
    one batched product per projection where every receiver reaches as many columns (a head's)."""
    r = len(cols)
    g = None  # [r, rows, d]: the first full batched product is taken as it is, not added into zeros
    for j, (m, _) in enumerate(lins):
        W = o_matrix(m)
        have = [i for i in range(r) if at_outputs[i][j] is not None and cols[i][j] is not None and cols[i][j].numel()]
        if not have:
            continue
        U = [at_outputs[i][j].reshape(-1, W.shape[0])[:, cols[i][j]] for i in have]  # [rows, k] each
        if len({u.shape[1] for u in U}) == 1:
            Wg = torch.stack([W[cols[i][j]] for i in have]).to(U[0].dtype)  # (h, k, d)
            part = torch.bmm(torch.stack(U), Wg)
            if g is None and len(have) == r:
                g = part
                continue
            g = _zeros(g, r, n)
            g[have] += part
        else:
            g = _zeros(g, r, n)
            for i, u in zip(have, U, strict=True):
                g[i] += u @ W[cols[i][j]].to(u.dtype)
    return _zeros(g, r, n).view(r, *n.shape)


def _zeros(g, r: int, n: torch.Tensor) -> torch.Tensor:
    return torch.zeros((r, n.numel() // n.shape[-1], n.shape[-1]), dtype=n.dtype) if g is None else g


def _disjoint(reach: list[list]) -> bool:
    """No column of a projection is reached by two heads' cotangents (the heads are separable after it)."""
    for j in range(len(reach[0])):
        masks = [per[j] for per in reach if per[j] is not None]
        if masks and int(torch.stack(masks).sum(0).max()) > 1:
            return False
    return True


def _within(at_outputs, cols: list[list]) -> bool:
    """The summed backward reached no column outside the receivers' recorded columns."""
    for j, U in enumerate(at_outputs):
        if U is None:
            continue
        seen = torch.zeros(U.shape[-1], dtype=torch.bool)
        for per in cols:
            if per[j] is not None:
                seen[per[j]] = True
        if bool(U.reshape(-1, U.shape[-1])[:, ~seen].ne(0).any()):
            return False
    return True


def norm_vjp(normed, x, gn: torch.Tensor, form, memo: dict, key) -> torch.Tensor:
    """[r, *x.shape]: the cotangents ``gn`` at a norm's output taken back to its input ``x``. Where the norm was
    identified as a LayerNorm or RMSNorm on this input (``form``, ground/norms.py) its derivative is written
    out (a few operations per receiver instead of autograd's batched backward); checked once per ``key``
    against autograd's backward of the summed cotangent, and autograd's used from then on if it differs."""
    if form is None or memo.get(key) is False:
        return plain_vjp(normed, x, gn)
    g = form.vjp(gn)
    if key not in memo:
        memo[key] = _sums_to_plain(normed, x, gn, g)
    return g if memo[key] else plain_vjp(normed, x, gn)


def fused_through_norm(y, n, cot, units: list[int], taps: list, form, *, copies: int, memo: dict, key):
    """[r, n, T, d]: the receivers' gradients at the norm's input, summed over ``copies`` stacked IG steps —
    head_vjp and norm_vjp in one, with the sums over steps taken where they are cheap. For an identified
    LayerNorm/RMSNorm (``form``: c, σ, scale; a = 1/σ) and one projection W whose columns the heads own
    (head_vjp's column map, made on an earlier layer), receiver i's gradient is

        Σ_k [(U_ik a_k) W̃_i − a_k mean(U_ik W̃_i) − c_k (U_ik · W̃_i c_k) a_k³ / d],   W̃ = W ⊙ scale

    (the mean term for a LayerNorm only): the first sum over steps is taken on U [rows, head dims] before one
    product with the weight, the last as one small product over steps. None where it does not apply (the
    caller takes head_vjp and norm_vjp); checked once per ``key`` against autograd (sum over receivers)."""
    cols = memo.get(key)
    lins = [(m, out) for m, inp, out in taps if inp is n]
    if form is None or not isinstance(cols, dict) or memo.get(("fused", key)) is False:
        return None
    if not set(units) <= set(cols) or any(len(cols[u]) != len(lins) for u in units):
        return None
    reached = {j for u in units for j, c in enumerate(cols[u]) if c is not None and c.numel()}
    if len(reached) != 1:  # one projection carries this channel (q_proj, or a fused qkv)
        return None
    (j,) = reached
    C = [cols[u][j] for u in units]
    if len({c.numel() for c in C}) != 1:
        return None
    (U,) = torch.autograd.grad(y, [lins[j][1]], _kept(cot, units), retain_graph=True)
    if not _within([U], [[c] for c in C]):
        return None
    g = _fused(U, lins[j], torch.stack(C), form, copies)
    return g.view(len(units), -1, *n.shape[1:])


def _fused(U, lin: tuple, C: torch.Tensor, form, copies: int) -> torch.Tensor:
    """[r, rows / copies, d] (see fused_through_norm). U [.., out] at the projection, lin (module, its output
    on this replay), C [r, k] the receivers' columns."""
    dt = form.c.dtype
    d = form.c.shape[-1]
    c = form.c.reshape(-1, d)  # (R, d), R = copies · rows
    sigma = form.sigma.reshape(-1, 1)
    a = 1 / sigma  # (R, 1)
    W = o_matrix(lin[0]).to(dt)  # (out, d)
    U = U.reshape(c.shape[0], -1).to(dt)  # (R, out)
    # W̃_i c = σ (W n − W b) on the replay's own input n = scale ⊙ c / σ + b: the projection's output, no product
    bias = param(lin[0], "bias")
    Q = lin[1].detach().reshape(c.shape[0], -1).to(dt) - W @ form.bias.to(dt)
    Q = (Q if bias is None else Q - bias.to(dt)) * sigma  # (R, out)
    Ur, Qr, Wr = _columns(U, C), _columns(Q, C), _columns(W.t(), C).permute(1, 2, 0) * form.scale  # W̃ rows (r, k, d)
    S = (Ur * a[..., None]).unflatten(0, (copies, -1)).sum(0)  # (R/c, r, k): the steps summed in head space
    g = torch.bmm(S.transpose(0, 1), Wr)  # (r, R/c, d)
    coef = ((Ur * Qr).sum(-1) * a.pow(3) / d).unflatten(0, (copies, -1))  # (c, R/c, r): c · h per receiver
    g -= torch.einsum("ktr,ktd->rtd", coef, c.unflatten(0, (copies, -1)))
    if form.centred:
        mean = ((Ur * Wr.mean(-1)).sum(-1) * a).unflatten(0, (copies, -1)).sum(0)  # (R/c, r)
        g -= mean.t()[..., None]
    return g


def _columns(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """X[:, C] as (rows, r, k): a view where the receivers own consecutive blocks of columns (the usual layout)."""
    r, k = C.shape
    start = int(C[0, 0])
    if torch.equal(C.flatten(), torch.arange(start, start + r * k)):
        return X[:, start : start + r * k].unflatten(1, (r, k))
    return X[:, C]


def check_fused(g, normed, x, y, n, cot, units: list[int], *, copies: int, memo: dict, key) -> bool:
    """The fused gradients, summed over receivers, against autograd's backward of the summed cotangent
    through the projection and the norm (folded over the steps); the verdict kept for ``key``."""
    fkey = ("fused", key)
    if fkey not in memo:
        (gn,) = torch.autograd.grad(y, n, _kept(cot, units), retain_graph=True)
        (gx,) = torch.autograd.grad(normed, x, gn, retain_graph=True)
        memo[fkey] = _agrees(g.sum(0), gx.unflatten(0, (copies, -1)).sum(0))
    return memo[fkey]


def _batched_grad(y, outs: list, grad_out: torch.Tensor) -> list:
    try:
        return list(
            torch.autograd.grad(
                y, outs, grad_outputs=grad_out, retain_graph=True, is_grads_batched=True, allow_unused=True
            )
        )
    except RuntimeError:
        per = [torch.autograd.grad(y, outs, grad_outputs=go, retain_graph=True, allow_unused=True) for go in grad_out]
        return [None if per[0][i] is None else torch.stack([p[i] for p in per]) for i in range(len(outs))]


def _sums_to_plain(y, n, grad_out: torch.Tensor, g: torch.Tensor) -> bool:
    """The products are linear in the cotangent: their sum must be the plain backward of the summed cotangent."""
    (whole,) = torch.autograd.grad(y, n, grad_outputs=grad_out.sum(0), retain_graph=True)
    return _agrees(g.sum(0), whole)


def _agrees(got: torch.Tensor, whole: torch.Tensor) -> bool:
    """Equal to rounding: 1e-5 of the largest value in float32 or wider, 1e-2 in half precision."""
    tol = (1e-5 if torch.finfo(got.dtype).eps < 1e-6 else 1e-2) * (float(whole.abs().max()) or 1.0)
    return bool((got.to(whole.dtype) - whole).abs().max() <= tol)


__all__ = ["check_fused", "fused_through_norm", "head_vjp", "linear_taps", "norm_vjp", "plain_vjp"]
