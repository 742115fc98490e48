"""The floors run one way: engine → read, check, cost, learn → show → serve → cli (docs/architecture.md).

The test reads every module's imports with `ast` (no import is executed), resolves relative
imports to attnroute's top-level folders and fails on any arrow the table below does not allow.
The same walk is run on a synthetic tree with an upward import to show that it can fail.
"""

import ast
from pathlib import Path

import attnroute

SRC = Path(attnroute.__file__).parent

# floor -> the floors its modules may import. The ground floor (errors, settings, progress, promptset)
# imports nothing of attnroute and no torch; models loads what read, check and cost use. No sideways arrows.
GROUND = {"errors", "settings", "progress", "promptset", "bundled", "files"}
ALLOWED = {
    **{g: GROUND for g in GROUND},
    "engine": GROUND | {"engine"},
    "audio": GROUND,  # WAV in, Whisper's features out
    "models": GROUND | {"engine", "models"},  # the one door (ct2, whisper: the speech source)
    "read": GROUND | {"engine", "models", "read", "audio"},
    "check": GROUND | {"engine", "models", "check"},
    "cost": GROUND | {"engine", "models", "cost"},
    "learn": GROUND | {"engine", "learn"},
    "show": GROUND | {"engine", "read", "check", "cost", "learn", "show", "audio"},
    "bench": GROUND | {"engine", "models", "read", "check", "cost", "learn", "bench"},
    "serve": GROUND | {"engine", "models", "read", "show", "serve", "audio"},  # the explorer: reads and shows, live
    "cli": GROUND | {"engine", "models", "read", "check", "cost", "learn", "show", "bench", "serve", "cli", "audio"},
    "__init__": set(),  # names load lazily (PEP 562): the root imports no floor
}
ANALYSIS = ("errors", "settings", "progress", "promptset", "engine", "models", "read", "check", "cost", "learn")
NOT_IN_ANALYSIS = ("matplotlib", "argparse", "rich")  # analysis floors return data; they draw and parse nothing


def floor_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imports(path: Path, root: Path, package: str = "attnroute"):
    """(imported attnroute floor or outside module, line) for every import in the file."""
    tree = ast.parse(path.read_text())
    here = path.relative_to(root).with_suffix("").parts  # ('read', 'heads') or ('read', '__init__')
    pkg = here[:-1]  # the package the module lives in
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                yield (parts[1] if parts[0] == package and len(parts) > 1 else parts[0]), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] == package:
                    targets = parts[1:2] or [a.name for a in node.names]
                    yield from ((t, node.lineno) for t in targets)
                else:
                    yield parts[0], node.lineno
                continue
            base = pkg[: len(pkg) - (node.level - 1)]
            target = list(base) + (node.module.split(".") if node.module else [])
            names = target[:1] or [a.name for a in node.names]  # `from . import x` at the root
            yield from ((n, node.lineno) for n in names)


def violations(root: Path, floors=ALLOWED, package: str = "attnroute") -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        floor = floor_of(path, root)
        if floor not in floors:
            continue
        for target, line in imports(path, root, package):
            rel = path.relative_to(root)
            if target in floors and target not in floors[floor]:
                found.append(f"{rel}:{line} ({floor}) imports {target}")
            if floor in ANALYSIS and target in NOT_IN_ANALYSIS:
                found.append(f"{rel}:{line} ({floor}) imports {target}, which belongs to show/ or cli")
    return found


def test_attnroute_floors_run_one_way():
    assert violations(SRC) == []


def test_nothing_but_the_cli_imports_bench():
    importers = {
        floor_of(path, SRC) for path in SRC.rglob("*.py") for target, _ in imports(path, SRC) if target == "bench"
    }
    assert importers <= {"cli", "bench"}


def _synthetic(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "attnroute"
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_the_walk_catches_an_upward_and_a_sideways_import(tmp_path):
    root = _synthetic(
        tmp_path,
        {
            "engine/__init__.py": "",
            "engine/stages.py": "from ..read.heads import read_heads\n",  # engine reaching up
            "read/__init__.py": "",
            # read reaching up to show, relative and absolute
            "read/headtable.py": "from ..show.terminal import table\nimport attnroute.show.figures\n",
            "cost/bill.py": "from ..bench.measure import seconds\nimport matplotlib\n",  # sideways, and drawing
            "show/report.py": "from ..read.capture import view\n",  # allowed
        },
    )
    found = violations(root)
    assert "engine/stages.py:1 (engine) imports read" in found
    assert "read/headtable.py:1 (read) imports show" in found and "read/headtable.py:2 (read) imports show" in found
    assert "cost/bill.py:1 (cost) imports bench" in found
    assert any("imports matplotlib" in v for v in found)
    assert not any(v.startswith("show/") for v in found)


# ------------------------------------------------------------------------------------ inside read/, and circles

# read/report.py composes rooms (a text read and a corpus read), read/speech the speech variants of the verbs,
# read/verbs.py sends a verb to its text room or to the speech wing; no room imports them
READ_COMPOSITION = {"report", "speech", "verbs"}


def module_imports(root: Path, package: str = "attnroute") -> dict[str, set[str]]:
    """Every module of the tree (dotted name) -> the modules of the tree it imports, at any depth (an
    import inside a function counts: it closes a circle just the same)."""
    mods = {}
    for p in root.rglob("*.py"):
        parts = p.relative_to(root).with_suffix("").parts
        mods[".".join((package,) + (parts[:-1] if parts[-1] == "__init__" else parts))] = p
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, p in mods.items():
        pkg = name.split(".") if p.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                base = pkg[: len(pkg) - (node.level - 1)] if node.level else []
                target = ".".join(base + (node.module.split(".") if node.module else []))
                for a in node.names:
                    hit = f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target
                    if hit in mods and hit != name:
                        graph[name].add(hit)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (strongly connected components of more than one module), Tarjan's algorithm."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def read_tier(module: str, packages: set[str], package: str = "attnroute") -> str | None:
    """floor (read's top-level modules and read/ground/), room:NAME (each other folder), composition
    (read/report.py); None outside read/ and for read/__init__ (the facade that re-exports)."""
    parts = module.split(".")
    if parts[:2] != [package, "read"] or len(parts) == 2:
        return None
    top = parts[2]
    if top in READ_COMPOSITION:
        return "composition"
    return "floor" if top == "ground" or f"{package}.read.{top}" not in packages else f"room:{top}"


def read_violations(root: Path, package: str = "attnroute") -> list[str]:
    """Inside read/: the floor imports no room and no composition; a room imports no other room."""
    graph = module_imports(root, package)
    packages = {m for m in graph if (root.joinpath(*m.split(".")[1:]) / "__init__.py").exists()}
    found = []
    for src, targets in graph.items():
        a = read_tier(src, packages, package)
        for dst in targets:
            b = read_tier(dst, packages, package)
            if a is None or b is None:
                continue
            if (a == "floor" and b != "floor") or (a.startswith("room:") and b not in ("floor", a)):
                found.append(f"{src} ({a}) imports {dst} ({b})")
    return found


def test_read_rooms_import_the_floor_never_one_another():
    assert read_violations(SRC) == []


def test_no_import_circles_anywhere():
    assert circles(module_imports(SRC)) == []


def test_the_read_rules_and_the_circle_finder_can_fail(tmp_path):
    root = _synthetic(
        tmp_path,
        {
            "__init__.py": "",
            "read/__init__.py": "",
            "read/heads.py": "def f():\n    from .patching.ablation import x\n",  # floor reaching into a room
            "read/ground/__init__.py": "",
            "read/stimuli.py": "",
            "read/ground/metrics.py": "from ..stimuli import f\n",  # allowed: floor to floor
            "read/patching/__init__.py": "",
            "read/patching/ablation.py": "from ..corpus.read import y\n",  # sideways between rooms
            "read/corpus/__init__.py": "",
            "read/corpus/read.py": "from ..ground.metrics import m\n",  # allowed
            "read/report.py": "from .corpus.read import y\n",  # allowed: the composition
            "show/__init__.py": "",
            "show/a.py": "from . import b\n",
            "show/b.py": "def g():\n    from .a import x\n",  # a circle closed inside a function
        },
    )
    found = read_violations(root)
    assert "attnroute.read.heads (floor) imports attnroute.read.patching.ablation (room:patching)" in found
    assert "attnroute.read.patching.ablation (room:patching) imports attnroute.read.corpus.read (room:corpus)" in found
    assert len(found) == 2
    assert circles(module_imports(root)) == [["attnroute.show.a", "attnroute.show.b"]]
