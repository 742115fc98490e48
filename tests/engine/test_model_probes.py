"""Model-reading probes against their definitions, on small random tensors."""

import pytest
import torch

import attnroute as ar
from attnroute.engine.probes import Diagonals, KeyVectors, PerLayer, value_norms


@pytest.mark.parametrize("C", [7, 3])  # 3: a model narrower than one head (H·D > C, as tiny qwen3 configs)
def test_value_norms_equal_the_explicit_projection(C):
    # ‖v_j W_O^h‖ with W_O^h the columns of the output projection that read head h; GQA: h reads kv h // G
    g = torch.Generator().manual_seed(0)
    B, H, Hkv, T, D = 2, 6, 2, 5, 4
    v = torch.randn(B, Hkv, T, D, generator=g, dtype=torch.float64)
    W = torch.randn(C, H * D, generator=g, dtype=torch.float64)
    got = value_norms(v, W, H)
    for h in range(H):
        f = v[:, h // (H // Hkv)] @ W[:, h * D : (h + 1) * D].T  # (B, T, C)
        torch.testing.assert_close(got[:, h], f.norm(dim=-1))


def test_key_vectors_and_diagonals_stream_like_full_weights():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 9, 8, generator=g, dtype=torch.float64) for _ in range(3))
    vec = torch.rand(1, 4, 9, 3, generator=g, dtype=torch.float64)
    kvp, diag = PerLayer(KeyVectors), PerLayer(lambda: Diagonals([1, 3]))
    kvp.by_layer[0] = KeyVectors()
    kvp.by_layer[0].vectors = vec
    ar.attend(q, k, v, ar.causal(), impl="blocked", probes=[kvp, diag], block_size=2, layer=0)
    _, tr = ar.attend(q, k, v, ar.causal(), impl="eager", return_trace=True)
    torch.testing.assert_close(kvp[0].rows(), (tr.weights @ vec).float(), atol=1e-6, rtol=0)
    w = tr.weights[0]
    for off in (1, 3):
        want = torch.stack([torch.tensor([w[h, i, i - off] if i >= off else 0.0 for i in range(9)]) for h in range(4)])
        torch.testing.assert_close(diag[0].rows(off)[0].double(), want, atol=1e-6, rtol=0)
