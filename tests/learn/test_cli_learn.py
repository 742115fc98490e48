"""`attnroute learn …` and `attnroute report --learn`: files written, figure printed, bad input refused in one line."""

import json

import pytest

from attnroute.cli import main
from attnroute.show import learn as learn_section
from attnroute.show import sections


def test_learn_induction_writes_png_json_and_html(tmp_path, capsys):
    code = main(["learn", "induction", "--steps", "40", "--every", "20", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "repeat loss" in out and ("▁" in out or "█" in out)  # the curves as sparklines
    data = json.loads((tmp_path / "induction.json").read_text())
    assert data["experiment"] == "induction" and data["curves"]["steps"] == [0, 20, 40]
    assert (tmp_path / "induction.png").stat().st_size > 10_000
    html = (tmp_path / "induction.html").read_text()
    assert "data:image/png;base64," in html and "Learn: an induction circuit forms" in html


def test_fixed_offset_defaults_to_learned_positions(tmp_path):
    assert main(["learn", "induction", "--fixed-offset", "--steps", "20", "--every", "20", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "induction-fixed-offset.json").read_text())
    assert data["settings"]["positions"] == "learned" and data["settings"]["fixed_offset"] == 24


@pytest.mark.parametrize(
    "argv, words",
    [
        (["learn", "induction", "--layers", "1"], "two layers"),
        (["learn", "induction", "--fixed-offset", "5"], "fixed_offset=5"),
        (["learn", "scale", "--steps", "0"], "--steps must be positive"),
        (["report", "--model", "minilm", "--learn", "nope.json"], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and "Traceback" not in err


def test_report_learn_rejects_a_json_that_is_not_a_result(tmp_path, capsys):
    bad = tmp_path / "other.json"
    bad.write_text('{"model": "smollm2"}')
    assert main(["report", "--model", "minilm", "--learn", str(bad), "--out", str(tmp_path / "r.html")]) == 2
    assert "not a result of `attnroute learn" in capsys.readouterr().err


def test_section_escapes_text_and_sits_in_the_report(tmp_path):
    from attnroute.learn.induction import InductionSettings, run

    result = run(InductionSettings(steps=20, every=10))
    result["verdict"]["lines"].append('<script>alert(1)</script> & "quotes"')
    html = learn_section.section(result)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    report = "<html><body><div>cards</div><!--__SECTIONS__--><script>/*page*/</script></body></html>"
    merged = sections.insert(report, [learn_section.sections([result])])
    assert merged.index("Learn: an induction circuit forms") < merged.index("/*page*/")
    with pytest.raises(ValueError, match="no place"):
        sections.insert("<html></html>", [learn_section.sections([result])])


def test_learn_json_goes_to_stdout_alone(capsys):
    assert main(["learn", "induction", "--steps", "2", "--every", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # the tables and verdict went to stderr or were left out
    assert data["experiment"] == "induction" and data["verdict"]["lines"]
