"""The repository stands alone and its map is true: no pointer outside it, no `build/` engine,
and the README's folder map names exactly the folders under src/attnroute/."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / p for p in out.split() if Path(p).suffix in (".py", ".md", ".toml", ".html", ".cfg", "")]


def test_nothing_points_outside_the_repo_or_at_the_old_build_folder():
    forbidden = re.compile(r"attnroute\.build|from \.build|from \.\.build|\.\./shared")
    hits = []
    for path in tracked_text_files():
        if path.is_file() and path != Path(__file__).resolve():
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if forbidden.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert hits == []


def test_readme_folder_map_matches_src():
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("src/attnroute/") : readme.index("tests/ ")]
    mapped = set(re.findall(r"^  (\w+)(?:/|\.py)", block, re.M))
    src = ROOT / "src" / "attnroute"
    actual = {p.name for p in src.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    actual |= {p.stem for p in src.glob("*.py") if p.stem != "__init__"}
    assert mapped == actual


def test_readme_stays_an_introduction():
    """The README is the opening, the two commands, the map and the engine; reference material lives
    in docs/ (the support matrix, the check gallery, the refusals)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split()) <= 3500
    for page in ("docs/reading-any-model.md", "docs/check.md", "docs/refusals.md", "docs/architecture.md"):
        assert page in readme and (ROOT / page).is_file()
