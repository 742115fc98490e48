"""A learn section in a real browser: the figure loads under the report's Content-Security-Policy."""

import pytest

from attnroute.learn.induction import InductionSettings, run
from attnroute.show import learn_section

from .test_report import browser_page


@pytest.fixture(scope="module")
def result():
    return run(InductionSettings(steps=20, every=10))


def test_learn_page_shows_its_figure_in_chromium(result, tmp_path):
    from playwright.sync_api import sync_playwright

    path = tmp_path / "learn.html"
    path.write_text(learn_section.page([result]), encoding="utf-8")
    with sync_playwright() as p:
        browser, page, events = browser_page(p, path)
        try:
            width = page.evaluate("document.querySelector('.learn img').naturalWidth")
            items = page.eval_on_selector_all(".learn li", "els => els.length")
        finally:
            browser.close()
    assert width > 500 and items == len(result["verdict"]["lines"])
    assert events["errors"] == [] and events["dialogs"] == []
