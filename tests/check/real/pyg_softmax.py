"""pyg-team/pytorch_geometric — torch_geometric/utils/softmax.py, softmax: the attention normalisation of
its graph attention layers (GATConv, AGNNConv, GlobalAttention): exp of each edge's score, divided by the
sum over the edges into the same node.

Source: https://github.com/pyg-team/pytorch_geometric, path torch_geometric/utils/softmax.py, commit
83b451f9ecf4d1fc7c674c6461937ffaae4135ac (before the fix) and commit e98be78314d77cfaeb6799ed3aac1a114d1bb80d
(the fix, "sub max in softmax to avoid overflow"). License: MIT, Copyright (c) 2018 Matthias Fey. Copied:
softmax at each commit. The bug: ``src.exp()`` with no maximum subtracted overflows once a score passes
the dtype's exp range (≈ 11 in fp16, ≈ 88 in fp32) and the row becomes inf/inf = NaN — reported as PyG
issue #53 ("scatter softmax output 'nan'" on GatConv), fixed in e98be78 by subtracting the per-node
``scatter_max`` first.
Adapter: a dense attention is a complete graph per (example, head, query): every key the mask allows is an
edge into that query's node, its score q·k·scale (what GATConv's alpha is to its softmax); PyG's softmax
normalises the edges, and the values are summed per node as GATConv does (``scatter_add(alpha · x[col],
row)``). A query with no allowed key has no edge, so its output is 0. torch_scatter (a compiled extension)
is replaced by the two reductions it performs, written with torch's own index_add_ / scatter_reduce
(same results: a sum per index, a maximum per index). ``maybe_num_nodes`` returns the count it is given.

Expected, from reading: before the fix the overflow check fails in every dtype (fp16 from logits near 11,
bf16/fp32 near 88), named "overflow", and so does sentinel_overrun — its visible logits of −2·10⁴ make every
exp 0 and the row 0/0, named an underflow (the code has no sentinel to blame); every mask passes (a masked
key is no edge at all). After the fix every check passes.
"""

import torch


# --- torch_scatter 1.x, as PyG 1.0 called it (scatter_add / scatter_max over dim 0, dim_size nodes) ---
def scatter_add(src, index, dim=0, dim_size=None):
    return src.new_zeros((dim_size,) + tuple(src.shape[1:])).index_add_(0, index, src)


def scatter_max(src, index, dim=0, dim_size=None):
    out = src.new_full((dim_size,) + tuple(src.shape[1:]), float("-inf"))
    return out.scatter_reduce_(0, index, src, "amax", include_self=True), None


def maybe_num_nodes(index, num_nodes=None):
    return index.max().item() + 1 if num_nodes is None else num_nodes


def softmax_before(src, index, num_nodes=None):
    # --- copied (commit 83b451f, softmax) ---
    num_nodes = maybe_num_nodes(index, num_nodes)

    out = src.exp()
    out = out / scatter_add(out, index, dim=0, dim_size=num_nodes)[index]

    return out


def softmax_fixed(src, index, num_nodes=None):
    # --- copied (commit e98be78, softmax) ---
    num_nodes = maybe_num_nodes(index, num_nodes)

    out = src - scatter_max(src, index, dim=0, dim_size=num_nodes)[0][index]
    out = out.exp()
    out = out / scatter_add(out, index, dim=0, dim_size=num_nodes)[index]

    return out


def _as_graph(softmax):
    """fn(q, k, v, attn_mask) over PyG's softmax: one node per (b, h, query), one edge per allowed key."""

    def attention(q, k, v, attn_mask=None):
        B, H, Tq, D = q.shape
        Hkv, Tk = k.shape[1], k.shape[2]
        k = k.repeat_interleave(H // Hkv, 1)
        v = v.repeat_interleave(H // Hkv, 1)
        scores = (q @ k.transpose(-1, -2)) * D**-0.5  # (B, H, Tq, Tk)
        keep = torch.ones(B, H, Tq, Tk, dtype=torch.bool) if attn_mask is None else attn_mask.expand(B, H, Tq, Tk)
        b, h, i, j = keep.nonzero(as_tuple=True)  # the edges
        node = (b * H + h) * Tq + i  # the query each edge points into
        alpha = softmax(scores[b, h, i, j], node, num_nodes=B * H * Tq)
        out = scatter_add(alpha[:, None] * v[b, h, j], node, dim=0, dim_size=B * H * Tq)
        return out.view(B, H, Tq, -1)

    return attention


TARGETS = [
    {
        "name": "PyG softmax (before e98be78)",
        "fn": _as_graph(softmax_before),
        "convention": "sdpa",
        "expect": {"overflow": "fail", "sentinel_overrun": "fail"},
        "cause": "the softmax does not subtract the row maximum",
    },
    {
        "name": "PyG softmax (fixed, e98be78)",
        "fn": _as_graph(softmax_fixed),
        "convention": "sdpa",
        "expect": {},
    },
]
