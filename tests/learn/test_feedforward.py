"""learn ff, shortened: equal budgets, the control task both stacks solve, and FF ahead on the table."""

import pytest

from attnroute.learn import feedforward

pytestmark = pytest.mark.slow  # trains or measures for seconds to tens of seconds; make test runs it


def test_the_two_stacks_have_the_same_budget():
    from attnroute.learn.train import build_model

    params = {
        name: sum(p.numel() for p in build_model(cfg, 0).parameters())
        for name, cfg in feedforward.configs_of(feedforward.FFSettings()).items()
    }
    assert params["with FF"] == pytest.approx(params["attention-only"], rel=0.02)
    cfgs = feedforward.configs_of(feedforward.FFSettings())
    assert cfgs["attention-only"].d_ff == 0 and cfgs["with FF"].d_ff > 0


@pytest.fixture(scope="module")
def short():
    # 150 steps: permutation solved (0.008 nats) and the table learned (0.17), measured
    return feedforward.run(feedforward.FFSettings(vocab=32, steps=150, every=50))


def test_permutation_is_within_reach_of_routing_alone(short):
    perm = {r["model"]: r for r in short["runs"] if r["task"] == "permutation"}
    assert perm["attention-only"]["final"] < feedforward.SOLVED and perm["with FF"]["final"] < feedforward.SOLVED


def test_the_table_is_learned_and_the_verdict_says_so(short):
    table = {r["model"]: r for r in short["runs"] if r["task"] == "table"}
    assert table["with FF"]["final"] < short["chance"] - 1.0  # it learned something real in 150 steps
    assert all(r["curves"]["loss"][0] > short["chance"] - 0.3 for r in short["runs"])  # from chance
    lines = short["verdict"]["lines"]
    assert "Same budget" in lines[0] and lines[1].startswith("Permutation") and lines[2].startswith("Table")
