"""Your own metric, checked wherever it is called: one finite float per prompt, or an InputError naming the
field `metric` in one line — in patch (the estimate and the exact runs) and in route attribution. Also the
API's other hostile arguments: a list of strings for prompts, one site given as a string."""

from __future__ import annotations

import pytest
import torch

import attnroute as ar
from attnroute.errors import InputError, InputTypeError
from attnroute.models import load
from attnroute.promptset import PromptPair

from .zoo import build

TINY = [
    PromptPair("the cat sat on the mat and", "the dog sat on the mat and", " the", " a"),
    PromptPair("a bird flew over the house and", "a bird ran over the house and", " the", " a", row=2),
]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return load(str(build("llama", tmp_path_factory.mktemp("zoo"))))


def last(x):
    """The answer position's first logit, per prompt: a metric's usual shape, (B,)."""
    return x[:, -1, 0] if x.dim() == 3 else x[:, 0]


BAD = {
    "one number for the batch": (lambda x, b: last(x).sum(), "shape"),
    "one value too many": (lambda x, b: torch.cat([last(x), last(x)[:1]]), "shape"),
    "NaN": (lambda x, b: last(x) * float("nan"), "finite"),
    "inf": (lambda x, b: last(x) + float("inf"), "finite"),
    "a list": (lambda x, b: [0.0] * x.shape[0], "list"),
    "integers": (lambda x, b: torch.zeros(x.shape[0], dtype=torch.long), "int64"),
    "an exception": (lambda x, b: 1 / 0, "ZeroDivisionError"),
}


def refused(call, said: str) -> InputError:
    with pytest.raises(InputError) as e:
        call()
    assert e.value.field == "metric" and "\n" not in str(e.value), str(e.value)
    assert said in str(e.value), str(e.value)
    return e.value


@pytest.mark.parametrize("case", sorted(BAD))
def test_patch_refuses_a_metric_that_is_not_one_finite_float_per_prompt(tiny_llama, case):
    fn, said = BAD[case]
    refused(lambda: ar.patch(tiny_llama, TINY, metric=fn, exact=0), said)


@pytest.mark.parametrize("case", sorted(BAD))
def test_route_attribution_refuses_the_same_metrics(tiny_llama, case):
    fn, said = BAD[case]
    refused(lambda: ar.route_attribution(tiny_llama, "the cat sat on the mat and the", metric=fn, layers=[0]), said)


def test_a_metric_that_goes_bad_only_in_the_exact_runs_is_caught_there(tiny_llama):
    """Finite at the clean and corrupt runs, NaN once a head is patched: the exact settling refuses it."""
    calls = []

    def flaky(x, b):
        calls.append(1)
        v = last(x)
        return v if len(calls) <= 3 else v * float("nan")

    refused(lambda: ar.patch(tiny_llama, TINY, metric=flaky, exact="all"), "finite")


def test_a_good_callable_metric_runs_and_equals_the_built_in(tiny_llama):
    def diff(x, b):
        rows = torch.arange(x.shape[0])
        return x[rows, -1, b["answer"]] - x[rows, -1, b["wrong"]]

    mine = ar.patch(tiny_llama, TINY, metric=diff, exact="all")
    built_in = ar.patch(tiny_llama, TINY, metric="logit-diff", exact="all")
    assert len(mine.rows) == len(built_in.rows) > 0
    for a, b in zip(mine.rows, built_in.rows, strict=True):
        assert (a["layer"], a["head"], a["site"]) == (b["layer"], b["head"], b["site"])
        assert a["delta"] == pytest.approx(b["delta"], abs=1e-5)


def test_prompts_as_plain_strings_are_a_type_error_naming_prompts(tiny_llama):
    with pytest.raises(InputTypeError) as e:
        ar.patch(tiny_llama, ["the cat sat on the mat"])
    assert e.value.field == "prompts" and "PromptPair" in str(e.value)


def test_one_site_given_as_a_string_is_that_site_never_its_letters(tiny_llama):
    r = ar.patch(tiny_llama, TINY, sites="head", exact=0)
    assert r.meta.sites == ["head"] or tuple(r.meta.sites) == ("head",)
    with pytest.raises(InputError) as e:
        ar.patch(tiny_llama, TINY, sites="heads")
    assert e.value.field == "sites" and "'heads'" in str(e.value)
