"""A learn section in a real browser: the figure loads under the report's Content-Security-Policy."""

import pytest

from attnroute.learn.induction import InductionSettings, run
from attnroute.show import learn as learn_section


@pytest.fixture(scope="module")
def result():
    return run(InductionSettings(steps=20, every=10))


def test_learn_page_shows_its_figure_in_chromium(result, tmp_path, open_page):
    path = tmp_path / "learn.html"
    path.write_text(learn_section.page([result]), encoding="utf-8")
    with open_page(path, ready=".learn img") as (page, events):
        page.wait_for_function("document.querySelector('.learn img').complete")  # the data: URI decoded
        width = page.evaluate("document.querySelector('.learn img').naturalWidth")
        items = page.eval_on_selector_all(".learn li", "els => els.length")
    assert width > 500 and items == len(result["verdict"]["lines"])
    assert events["errors"] == [] and events["dialogs"] == []
