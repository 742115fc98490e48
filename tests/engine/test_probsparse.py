"""ProbSparse (Informer) against its definition and against full attention (docs/pitfalls.md)."""

import math

import pytest
import torch

import attnroute as ar

from .helpers import qkv


def test_sizes_follow_c_ceil_ln_and_are_clipped():
    assert ar.probsparse_sizes(96, 96, 5) == (5 * math.ceil(math.log(96)), 5 * math.ceil(math.log(96)))
    assert ar.probsparse_sizes(10, 10, 5) == (10, 10)  # 5·⌈ln 10⌉ = 15 > 10: clipped
    assert ar.probsparse_sizes(200, 30, 2) == (2 * math.ceil(math.log(30)), 2 * math.ceil(math.log(200)))
    assert ar.probsparse_sizes(1, 1, 5) == (1, 1)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_every_query_active_equals_full_attention(causal, dtype, atol):
    q, k, v = qkv(2, 4, 2, 12, 12, 8, dtype=dtype)
    out = ar.probsparse_attend(q, k, v, factor=100, causal=causal, generator=torch.Generator().manual_seed(0))
    full = ar.attend(q, k, v, ar.causal() if causal else None, impl="eager")
    torch.testing.assert_close(out, full, atol=atol, rtol=0)


def test_lazy_rows_mean_vs_informer_cumsum():
    q, k, v = qkv(1, 2, 2, 64, 64, 8, dtype=torch.float64)
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    mean_out, top = ar.probsparse_attend(q, k, v, causal=True, lazy="mean", generator=g(), return_index=True)
    sum_out = ar.probsparse_attend(q, k, v, causal=True, lazy="cumsum", generator=g())
    lazy = torch.ones(64, dtype=torch.bool)
    lazy[top[0, 0]] = False
    t = torch.arange(64)[lazy]
    torch.testing.assert_close(mean_out[0, 0, lazy], v[0, 0].cumsum(0)[t] / (t[:, None] + 1))
    torch.testing.assert_close(sum_out[0, 0, lazy], v[0, 0].cumsum(0)[t])
    # the active rows are identical under both choices
    torch.testing.assert_close(mean_out[0, 0, ~lazy], sum_out[0, 0, ~lazy])
    # non-causal lazy rows get mean(V)
    out, top = ar.probsparse_attend(q, k, v, generator=g(), return_index=True)
    lazy = torch.ones(64, dtype=torch.bool)
    lazy[top[0, 1]] = False
    torch.testing.assert_close(out[0, 1, lazy], v[0, 1].mean(0).expand(int(lazy.sum()), 8))


def test_generator_makes_it_deterministic_and_divisor_is_explicit():
    q, k, v = qkv(1, 2, 2, 100, 100, 8, seed=5)
    a = ar.probsparse_attend(q, k, v, generator=torch.Generator().manual_seed(1))
    b = ar.probsparse_attend(q, k, v, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    _, top_keys = ar.probsparse_attend(q, k, v, generator=torch.Generator().manual_seed(1), return_index=True)
    _, top_samp = ar.probsparse_attend(
        q, k, v, generator=torch.Generator().manual_seed(1), divisor="samples", return_index=True
    )
    assert top_keys.shape == top_samp.shape == (1, 2, 5 * math.ceil(math.log(100)))
    with pytest.raises(ValueError, match="divisor"):
        ar.probsparse_attend(q, k, v, divisor="median")


def test_cross_attention_shapes_and_causal_needs_equal_lengths():
    q, k, v = qkv(2, 3, 1, 17, 40, 8, Dv=5)
    assert ar.probsparse_attend(q, k, v).shape == (2, 3, 17, 5)
    q, k, v = qkv(1, 2, 2, 40, 17, 8)
    assert ar.probsparse_attend(q, k, v).shape == (1, 2, 40, 8)
    with pytest.raises(ValueError, match="L_Q == L_K"):
        ar.probsparse_attend(q, k, v, causal=True)


def _active_set_by_loops(q, k, U_part, u, divisor, seed):
    """An independent oracle: M(q_i) = max_j s_ij − Σ_j s_ij / (L_K or U_part) over the sampled keys,
    one query at a time in Python floats; the u largest are active. Only the key sample is drawn the
    way the implementation draws it (one torch.randint per call), so both see the same keys."""
    L_Q, L_K = q.shape[2], k.shape[2]
    idx = torch.randint(L_K, (L_Q, U_part), generator=torch.Generator().manual_seed(seed)).tolist()
    qq, kk = q[0, 0].double().tolist(), k[0, 0].double().tolist()
    m = []
    for i in range(L_Q):
        s = [sum(a * b for a, b in zip(qq[i], kk[j])) for j in idx[i]]
        m.append(max(s) - sum(s) / (L_K if divisor == "keys" else U_part))
    return set(sorted(range(L_Q), key=lambda i: -m[i])[:u])


def test_active_queries_match_a_loop_oracle_under_both_divisors_where_they_disagree():
    q, k, v = qkv(1, 1, 1, 60, 60, 4, seed=11)
    U_part, u = ar.probsparse_sizes(60, 60, 2)
    found_disagreement = False
    for seed in range(20):
        sets = {}
        for divisor in ("keys", "samples"):
            _, top = ar.probsparse_attend(
                q, k, v, factor=2, divisor=divisor, return_index=True, generator=torch.Generator().manual_seed(seed)
            )
            sets[divisor] = set(top[0, 0].tolist())
            assert sets[divisor] == _active_set_by_loops(q, k, U_part, u, divisor, seed)
        found_disagreement |= sets["keys"] != sets["samples"]
    assert found_disagreement  # the divisor changes the selection on this input: the test can tell them apart
