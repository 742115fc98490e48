"""The settle rule and measure_first on synthetic estimates: what is measured, how often, in which rounds."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnroute.read.ground.settle import SettleRule, measure_first, settle, settle_said


@given(n=st.integers(0, 60), chunk=st.integers(1, 20), groups=st.integers(1, 8), seed=st.integers(0, 99))
def test_measure_first_measures_each_once_in_rounds_of_whole_groups(n, chunk, groups, seed):
    rng = np.random.default_rng(seed)
    order = rng.permutation(80)
    group = lambda i: int(i) % groups  # noqa: E731
    rounds: list[list[int]] = []
    info = measure_first(order, n, rounds.append, chunk, group=group)
    seen = [i for r in rounds for i in r]
    assert sorted(seen) == sorted(order[:n].tolist())  # the first n, each once
    assert info == {"measured": n, "rounds": max(1, len(rounds))} and all(rounds)  # never an empty round
    assert all(len(r) >= chunk for r in rounds[:-1])  # only the last round may be short
    firsts = {}
    for k, r in enumerate(rounds):  # a group is never split across rounds with another group between
        for i in r:
            firsts.setdefault(group(i), k)
    for g in firsts:
        spans = [k for k, r in enumerate(rounds) if any(group(i) == g for i in r)]
        assert spans == list(range(spans[0], spans[0] + len(spans))) and len(spans) == 1


@given(seed=st.integers(0, 999), noise=st.floats(0.0, 0.5))
def test_a_settled_top_is_the_true_top_when_the_estimate_errs_within_what_it_measured(seed, noise):
    rng = np.random.default_rng(seed)
    exact = rng.normal(size=200) * np.geomspace(3, 0.01, 200)
    est = exact + rng.uniform(-noise, noise, size=200)
    # the largest error is among the first measured, so the band it sets bounds every other error
    worst = int(np.argmax(np.abs(est)))
    est[worst] = exact[worst] + (noise if est[worst] >= exact[worst] else -noise)
    order = np.argsort(-np.abs(est), kind="stable")
    measured: list[int] = []
    rule = SettleRule(first=10, step=5, top=5)
    info = settle(order, measured.extend, lambda idx: exact[idx], rule, estimate=est)
    assert len(measured) == len(set(measured)) == info["measured"]
    assert info["settled"]
    top = set(np.argsort(-np.abs(exact))[:5].tolist())
    got = set(sorted(measured, key=lambda i: -abs(exact[i]))[:5])
    assert got == top


def test_a_fooling_estimate_is_measured_once_a_measured_error_widens_the_band():
    """The issue's case: components whose estimates are near zero but whose exact effects are large are not
    in the estimate's top; a measured component that erred as much widens the band until they are measured."""
    exact = np.array([1.0, 0.9, 0.05, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.95])
    est = exact.copy()
    est[[0, 9]] = 0.1, 0.02  # saturated: the linear estimate says little
    est[2] = 0.8  # among the first measured, off by 0.75
    order = np.argsort(-np.abs(est), kind="stable")
    measured: list[int] = []
    info = settle(order, measured.extend, lambda idx: exact[idx], SettleRule(first=3, step=2, top=3), estimate=est)
    assert {0, 9} <= set(measured) and info["settled"]
    assert np.isclose(info["band"], 0.93)  # the largest error once all are seen: 0.95 estimated 0.02
    assert set(sorted(measured, key=lambda i: -exact[i])[:3]) == {0, 9, 1}
    # without that measured error nothing says the estimate is wrong: the rule stops at the estimate's top
    est[2] = exact[2]
    measured.clear()
    order = np.argsort(-np.abs(est), kind="stable")
    info = settle(order, measured.extend, lambda idx: exact[idx], SettleRule(first=3, step=2, top=3), estimate=est)
    assert 9 not in measured and info["band"] == 0.0


def test_a_band_that_excludes_nothing_measures_the_rest_at_once_never_round_by_round():
    """Issue 53.3: on q and k nothing mattered, the error band equalled the top, and settle measured every
    component 10 at a time (48 min). When every unmeasured component could enter the top, the rest are
    measured at once (grouped), said in the result; the settled top is the same as round by round."""
    rng = np.random.default_rng(0)
    exact = rng.normal(scale=0.01, size=120)  # nothing matters
    est = rng.normal(scale=0.01, size=120)  # an estimate no better than noise: a band as wide as the top
    order = np.argsort(-np.abs(est), kind="stable")
    calls: list[list[int]] = []
    rule = SettleRule(first=20, step=10, top=10)
    info = settle(order, calls.append, lambda idx: exact[idx], rule, estimate=est, measure_all=lambda idx: 4)
    assert info["all_at_once"] == 100 and info["measured"] == 120 and info["settled"]
    assert [len(c) for c in calls] == [20] and info["rounds"] == 5  # one first round, then 4 grouped rounds
    said = settle_said(info, 10, "heads", "measure more")
    assert "could exclude nothing: the last 100 measured at once" in said and "nothing unmeasured could enter" in said


def test_a_band_that_excludes_nothing_yet_grows_the_rounds_and_a_rising_floor_stops_them():
    """A band that excludes nothing after the first round measured everything at once — but a floor that rises
    as more is measured can still shut components out (here: 50 of 200 settle it). Only a band as wide as the
    top's floor (even an estimate of 0 could enter) measures the rest at once; otherwise the rounds double until
    the floor rises past what the rest could reach."""
    est = np.concatenate([np.full(20, 0.35), np.full(10, 0.30), np.full(170, 0.26)])
    exact = np.concatenate([np.full(20, 0.30), np.full(10, 0.34), np.full(170, 0.26)])
    calls: list[list[int]] = []
    rule = SettleRule(first=20, step=10, top=10)
    grouped = lambda idx: calls.append(idx) or 1  # noqa: E731  (a grown round: measured in whole groups)
    info = settle(range(200), calls.append, lambda idx: exact[idx], rule, estimate=est, measure_all=grouped)
    assert [len(c) for c in calls] == [20, 20, 10] and info["measured"] == 50 and info["settled"]
    assert info["all_at_once"] == 0 and info["grown"] == 20
    assert "20 in rounds that doubled" in settle_said(info, 10, "heads", "measure more")


def test_a_limit_caps_what_is_measured_at_once_and_the_rest_is_said():
    rng = np.random.default_rng(1)
    exact, est = rng.normal(scale=0.01, size=300), rng.normal(scale=0.01, size=300)
    order = np.argsort(-np.abs(est), kind="stable")
    seen: list[int] = []
    rule = SettleRule(first=20, step=10, top=10, limit=50)
    info = settle(order, seen.extend, lambda idx: exact[idx], rule, estimate=est)
    assert info["measured"] == len(seen) == 50 and info["all_at_once"] == 30
    assert not info["settled"] and info["could_enter"] > 0


@given(seed=st.integers(0, 999), noise=st.tuples(st.floats(0.0, 0.05), st.floats(0.0, 1.0)))
def test_per_channel_bands_settle_the_true_top_when_each_channel_errs_within_what_it_measured(seed, noise):
    """Issue 53.3: each channel's own band. Channel 0's estimate is close, channel 1's poor; each channel's
    largest error is among its first measured (its largest estimate), so its band bounds its other errors."""
    from attnroute.read.ground.settle import BAND_MIN

    rng = np.random.default_rng(seed)
    channels = np.array(["v", "mlp"])[rng.integers(0, 2, size=300)]
    exact = rng.normal(size=300) * np.geomspace(3, 0.01, 300)
    width = np.where(channels == "v", noise[0], noise[1])
    est = exact + rng.uniform(-1, 1, size=300) * width
    for c in ("v", "mlp"):
        mine = np.flatnonzero(channels == c)
        worst = mine[np.argmax(np.abs(est[mine]))]
        w = width[worst]
        est[worst] = exact[worst] + (w if exact[worst] >= 0 else -w)  # its error is the channel's largest
    order = np.argsort(-np.abs(est), kind="stable")
    measured: list[int] = []
    rule = SettleRule(first=10, step=5, top=5)
    info = settle(order, measured.extend, lambda idx: exact[idx], rule, estimate=est, channels=channels)
    assert len(measured) == len(set(measured)) == info["measured"] and info["settled"]
    assert set(sorted(measured, key=lambda i: -abs(exact[i]))[:5]) == set(np.argsort(-np.abs(exact))[:5].tolist())
    assert all(sum(channels[i] == c for i in measured) >= BAND_MIN for c in ("v", "mlp"))  # each its own band
    assert set(info["bands"]) == {"v", "mlp"} and info["could_enter_by"] == {"v": 0, "mlp": 0}


def test_a_poor_channel_widens_only_its_own_reach():
    """One MLP edge estimated −1.23 and measured −0.21 (IOI's L20.H0>L20.MLP) set one band over every channel:
    70,501 edges could still enter. With a band per channel only the MLP's could; a channel with fewer than
    BAND_MIN measured keeps the overall band."""
    from attnroute.read.ground.settle import BAND_MIN, SettleRule, band

    n_measured = 2 * BAND_MIN
    channels = np.array(["mlp"] * BAND_MIN + ["q"] * BAND_MIN + ["mlp"] * 50 + ["q"] * 50 + ["k"] * 5)
    est = np.concatenate([np.linspace(2, 1, n_measured), np.full(105, 0.6)])  # the top-10 floor is about 1.5
    exact = est[:n_measured].copy()
    exact[0] = est[0] - 1.02  # the MLP's estimate errs by 1.02
    exact[BAND_MIN:n_measured] += 0.05  # q's by 0.05
    order = list(range(len(est)))
    b = band(order, n_measured, exact, est, SettleRule(top=10), channels)
    assert np.allclose([b.widths["mlp"], b.widths["q"]], [1.02, 0.05]) and b.floor > 0.6 + 0.05
    assert b.widths["k"] is None  # nothing of k measured: the overall band, 1.02
    assert b.could_enter == {"mlp": 50, "q": 0, "k": 5}
    whole = band(order, n_measured, exact, est, SettleRule(top=10))
    assert len(whole.candidates) == 105 and whole.widths is None  # one band: every unmeasured edge


def test_the_first_round_measures_each_channels_first_band_min():
    from attnroute.read.ground.settle import BAND_MIN, settle_rounds

    channels = np.array(["q"] * 100 + ["logits"] * 30)
    est = np.concatenate([np.linspace(3, 1, 100), np.linspace(0.5, 0.1, 30)])
    rounds = settle_rounds(range(130), lambda idx: est[idx], SettleRule(first=20, step=10, top=10), est, channels)
    first, at_once = next(rounds)
    assert first == list(range(20)) + list(range(100, 100 + BAND_MIN)) and not at_once


def test_rounds_double_while_more_could_enter_than_the_limit_leaves():
    """IOI's MLP band kept 4,601 edges in; rounds of 10 to the limit of 150 were 13 passes over every run. While
    more could enter than the limit leaves, a round measures as many as were measured before."""
    exact = np.concatenate([[5.0, 1.3], np.full(998, 0.01)])
    est = np.concatenate([[5.0, 2.3], np.linspace(0.5, 0.0, 998)])  # an error of 1.0: |est| ≥ 0.3 could enter
    order = np.argsort(-np.abs(est), kind="stable")
    calls: list[list[int]] = []
    info = settle(order, calls.append, lambda idx: exact[idx], SettleRule(first=20, step=10, top=2, limit=150), est)
    assert [len(c) for c in calls] == [20, 20, 40, 70] and info["measured"] == 150 and not info["settled"]
    # room under the limit for every candidate: rounds of ``step``, as before
    calls.clear()
    info = settle(order, calls.append, lambda idx: exact[idx], SettleRule(first=20, step=10, top=2, limit=2000), est)
    assert len(calls) > 2 and all(len(c) == 10 for c in calls[1:-1]) and info["settled"]


def test_an_unsettled_circuit_names_the_channel_whose_estimate_stops_it():
    """Issue 53.3: the recall circuit did not settle (band ±6.01) and did not say why; the verdict now names
    the edge whose estimate error sets the band, its channel, each channel's R², and what would settle it."""
    from attnroute.read.circuits.settling import unsettled_said

    def edge(label, channel, kind, exact, estimate):
        return {"label": label, "receiver": {"channel": channel, "kind": kind}, "exact": exact, "estimate": estimate}

    measured = [
        edge("embed>L0.MLP", None, "mlp", 8.35, 2.34),
        edge("L3.H1>L5.H2.v", "v", "head", 0.9, 0.8),
        edge("L5.H2>logits", None, "logits", 1.2, 1.1),
    ]
    agreement = {"mlp": {"r2": 0.65}, "v": {"r2": 0.19}, "logits": {"r2": None}}
    settle = {"band": 6.01, "settled": False, "could_enter": 70501, "measured": 150}
    said = unsettled_said(measured, settle, agreement)
    assert said.startswith(
        "not settled because of the mlp estimate (70,501 could enter; band ±6.01 from embed>L0.MLP, exact +8.350, "
        "estimated +2.340; R² 0.65)"
    )
    assert "measure the 70,501 that could enter (--limit 70,651)" in said and "(--ig-steps 5: EAP-IG" in said
    assert "(--ig-steps 10: EAP-IG" in unsettled_said(measured, settle, agreement, ig_steps=5)  # already 5: more
    paced = {**settle, "seconds_per_edge": 0.3}  # what measuring them would take at the run's pace
    assert "(--limit 70,651, about 353 min at this run's pace)" in unsettled_said(measured, paced, agreement)
    assert "about 12 s at this run's pace" in unsettled_said(measured, {**paced, "could_enter": 40}, agreement)
    # a band per channel: only the channels that still let edges in are named, each with its own band
    by = {**settle, "could_enter": 40, "bands": {"mlp": 6.01, "v": 0.1, "logits": 0.1}}
    by["could_enter_by"] = {"mlp": 30, "v": 10, "logits": 0}
    said = unsettled_said(measured, by, agreement)
    assert "the mlp estimate (30 could enter; band ±6.01" in said
    assert "the v estimate (10 could enter; band ±0.1" in said
    assert "logits" not in said and "(--limit 190)" in said
    assert unsettled_said(measured, {**settle, "settled": True}, agreement) is None
    assert unsettled_said(measured, {"rule": "all", "measured": 3}, agreement) is None  # no settle rule, no band


def test_a_joint_round_is_measured_in_pieces_of_whole_layers():
    """A round where the band excluded nothing asks for hundreds of components: they are measured (and saved
    to the checkpoint) in pieces of whole layers of at least 30, every component once."""
    import sys
    from types import SimpleNamespace

    import attnroute.read.patching.patch  # noqa: F401

    by_layers = sys.modules["attnroute.read.patching.patch"]._by_layers
    comps = {
        site: [SimpleNamespace(layer=i // units) for i in range(30 * units)] for site, units in (("head", 9), ("k", 3))
    }
    requests = {"head": list(range(20, 270)), "k": list(range(10, 90))}
    pieces = by_layers(requests, comps)
    flat = [(site, i) for piece in pieces for site, idx in piece.items() for i in idx]
    assert sorted(flat) == sorted((site, i) for site, idx in requests.items() for i in idx)
    assert all(sum(map(len, p.values())) >= 30 for p in pieces[:-1])
    layer_of = lambda site, i: comps[site][i].layer  # noqa: E731
    seen = [{layer_of(site, i) for site, idx in p.items() for i in idx} for p in pieces]
    assert all(a.isdisjoint(b) for k, a in enumerate(seen) for b in seen[k + 1 :])  # a layer in one piece only


def test_the_settle_line_gives_each_channels_band_and_what_could_enter_through_it():
    info = {"measured": 150, "band": 7.18, "settled": False, "could_enter": 4546}
    info |= {"bands": {"q": 0.75, "mlp": 7.18, "k": None}, "could_enter_by": {"q": 0, "mlp": 4546, "k": 0}}
    said = settle_said(info, 10, "edges", "raise --limit")
    assert said == (
        "exact top 10 edges: 150 measured, estimate error band ±7.18 (per channel: q ±0.75, mlp ±7.18); "
        "NOT settled: 4,546 unmeasured could still enter it (mlp 4,546) (raise --limit)"
    )


def test_with_a_bracket_an_edge_reaches_from_the_larger_of_its_two_estimates():
    """IOI's embed>L0.MLP: EAP −0.05, EAP-IG +6.93, exact +7.13. Settling on EAP's −0.05 alone, with a band
    from edges of its size, would call a top settled that misses its largest edge; the bracket keeps it in."""
    from attnroute.read.ground.settle import BAND_MIN, band

    n = 3 * BAND_MIN
    channels = np.array(["mlp"] * (n + 2))
    est = np.concatenate([np.linspace(2.0, 1.0, n), [0.05, 0.04]])  # the last two unmeasured
    other = est.copy()
    other[n] = 6.93  # the other estimate of the first unmeasured edge
    exact = est[:n] + 0.01
    rule = SettleRule(top=10)
    with_bracket = band(list(range(n + 2)), n, exact, est, rule, channels, other)
    assert with_bracket.candidates == [n] and with_bracket.widths["mlp"] == pytest.approx(0.01)
    assert band(list(range(n + 2)), n, exact, est, rule, channels).candidates == []  # one estimate: not seen


def test_with_a_bracket_a_channels_band_is_its_error_on_edges_of_the_unmeasured_ones_size():
    """IOI's L17.H4>L17.MLP: estimated 0.42, exact 0.93. That 0.52 set the band of every MLP edge, those of
    0.02 included, and kept 4,545 in against a top-20 floor of 0.46; the errors of edges of 0.02 (at most 0.2
    there) are what bound theirs. The measured edges of the unmeasured ones' size: estimates at most LIKE
    times the largest unmeasured, and never fewer than LIKE_MIN."""
    from attnroute.read.ground.settle import LIKE, LIKE_MIN, band

    big = np.linspace(3.0, 0.46, 19)  # the top, estimated well (with the 0.93 edge: a top-20 floor of 0.46)
    small = np.linspace(0.04, 0.025, LIKE_MIN)  # measured, of the unmeasured ones' size, each 0.05 off
    rest = np.linspace(0.02, 0.0, 200)  # unmeasured
    est = np.concatenate([big, [0.42], small, rest])
    exact = np.concatenate([big, [0.93], small + 0.05])
    m = len(exact)
    channels = np.array(["mlp"] * len(est))
    order = list(range(len(est)))
    b = band(order, m, exact, est, SettleRule(top=20), channels, est)
    assert b.widths["mlp"] == pytest.approx(0.05) and b.candidates == []
    assert 0.04 <= LIKE * 0.02 < 0.42  # the 0.42 edge is not of their size, the small ones are
    plain = band(order, m, exact, est, SettleRule(top=20), channels)  # without a bracket: the channel's largest
    assert plain.widths["mlp"] == pytest.approx(0.51) and len(plain.candidates) == 200
    # fewer of their size than LIKE_MIN measured: the LIKE_MIN smallest measured set the band
    few = band(order[: m - 5] + order[m:], m - 5, exact[: m - 5], est, SettleRule(top=20), channels, est)
    assert few.widths["mlp"] == pytest.approx(0.51)
