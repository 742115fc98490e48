"""The audio page of `attnroute report --audio`: self-contained, every cross-attention head's map with the
model's alignment heads marked, a head chosen by click in a real browser, user text escaped."""

import re
import shutil

import pytest

from attnroute.audio import AUDIO_DIR
from attnroute.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def page_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("speech")
    clip = d / "<img src=x onerror=alert(1)>.wav"  # a file name that would be markup if it were not escaped
    shutil.copy(AUDIO_DIR / "paris.wav", clip)
    out = d / "page.html"
    argv = ["report", "--model", "whisper-tiny", "--audio", str(clip), "--no-ablation", "--out", str(out)]
    assert main(argv) == 0
    return out


def test_the_page_is_self_contained_and_escaped(page_path):
    text = page_path.read_text()
    assert not re.search(r'(src|href)="(?!data:)[^"#]', text)  # nothing loaded from anywhere
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert text.count("<figure") == 24 and text.count('class="ref"') == 8  # OpenAI's eight, outlined
    assert "The capital of France is Paris." in text and "log-mel spectrogram" in text
    assert text.count("<option") == 24 and "<tr><td>L8.H0</td><td>cross</td>" in text


def test_a_click_shows_that_head_large(page_path, open_page):
    with open_page(page_path, "#large") as (page, events):
        before = page.get_attribute("#large", "src")
        page.click('figure[data-head="3.4"]')
        assert page.input_value("#pick") == "3.4"
        assert page.get_attribute("#large", "src") != before
        page.select_option("#pick", "0.0")
        assert page.get_attribute("#large", "src") != before
        assert events["errors"] == []


def test_text_report_flags_are_refused_with_audio(capsys):
    assert main(["report", "--audio", "paris", "--generate", "5"]) == 2
    assert "--generate applies to a text report" in capsys.readouterr().err
