"""demo/ imports only downward: every import in every module, at module level or inside a
function, names a module of its own layer or of a layer below (demo/__init__.py states the
rule), and no modules import each other around a loop, inside a layer either. Read from the
source with ast, nothing is imported, so a run costs milliseconds and an import hidden in a
function counts as much as one at the top.

Also: every child-process target and `python -m` module named in a string ("module:function",
as demo.core.isolation runs them) exists, since moving a module breaks those silently; and
nothing in demo/ imports lab/ (measuring and fixture code beside the app, which imports demo).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

DEMO = Path(__file__).resolve().parent.parent / "demo"
LAB = DEMO.parent / "lab"  # imports demo; demo never imports it (test_demo_never_imports_lab)

# Lowest first. A module may import from its own layer and from any layer of a lower rank;
# layers of the same rank (calibrate, records) are independent of each other.
LAYERS: dict[str, int] = {
    "core": 0,       # errors, settings, machine facts, memory, chunks, metrics, child processes
    "models": 1,     # presets, weight formats, the model store, the calibration read side
    "engine": 2,     # pipelines, the race, admission, the native safety record, the Arena front door
    "calibrate": 3,  # measuring this machine (python -m demo.calibrate), the doctor's checks
    "records": 3,    # the scoreboard, recordings, what a finished race leaves behind
    "bench": 4,      # the benchmark (python -m demo.bench)
    "web": 5,        # the Gradio page
    "serve": 6,      # the page and pipelines on a Ray Serve cluster
    "commands": 7,   # demo/<name>.py command modules and every package's __main__
}
ROOT_PACKAGE = "demo"  # demo/__init__.py: __version__ only; anyone may read it, it imports nothing


def module_name(path: Path) -> str:
    parts = list(path.relative_to(DEMO.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(DEMO.rglob("*.py"))}


def layer_of(module: str) -> Optional[str]:
    """The layer a demo module belongs to; None for one that has no place (a test failure)."""
    parts = module.split(".")
    if module == ROOT_PACKAGE:
        return ROOT_PACKAGE
    if parts[-1] == "__main__" or (len(parts) == 2 and module in MODULES and MODULES[module].name != "__init__.py"):
        return "commands"  # demo/cli.py, demo/prepare.py, …, and demo/<package>/__main__.py
    return parts[1] if parts[1] in LAYERS else None


def rank(layer: str) -> int:
    return -1 if layer == ROOT_PACKAGE else LAYERS[layer]


def target(module: str) -> str:
    """The demo module an imported name lives in: the longest prefix that is a module."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in MODULES:
            return ".".join(parts[:n])
    return module


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    importer: str
    imported: str


def imported_names(path: Path, source: str) -> Iterator[tuple[int, str]]:
    """(line, dotted name) for every name the module at `path` (its text: `source`) imports,
    wherever the import statement is; a relative import is resolved against its package."""
    importer = module_name(path)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import name`: name may be a submodule (its own layer) or an attribute.
            names = [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            yield node.lineno, name


def imports(path: Path, source: str) -> Iterator[Import]:
    """Every demo module the module at `path` (its text: `source`) imports, wherever the
    import statement is."""
    importer = module_name(path)
    for line, name in imported_names(path, source):
        if name == ROOT_PACKAGE or name.startswith(ROOT_PACKAGE + "."):
            yield Import(path, line, importer, target(name))


def violations(sources: dict[Path, str]) -> list[str]:
    """One sentence per import that goes up or sideways: file:line, both modules, both layers."""
    found = []
    for path, source in sources.items():
        for imp in imports(path, source):
            mine, theirs = layer_of(imp.importer), layer_of(imp.imported)
            where = f"{path.relative_to(DEMO.parent)}:{imp.line}"
            if mine is None or theirs is None:
                continue  # test_every_module_has_a_layer names it
            if mine == theirs or rank(theirs) < rank(mine):
                continue
            if mine == ROOT_PACKAGE:
                found.append(f"{where}: demo/__init__.py imports {imp.imported}; it must import nothing")
                continue
            kind = "a sibling layer" if rank(theirs) == rank(mine) else "a higher layer"
            found.append(f"{where}: {imp.importer} (layer {mine}) imports {imp.imported} (layer {theirs}), "
                         f"{kind}; move the code down or pass it in from above")
    return found


def test_every_module_has_a_layer():
    unplaced = [f"{p.relative_to(DEMO.parent)}" for m, p in MODULES.items() if layer_of(m) is None]
    assert not unplaced, ("modules outside every layer (put them in a layer's package, or make them a "
                          f"command module directly under demo/): {unplaced}")


def test_imports_only_go_down():
    found = violations({p: p.read_text(encoding="utf-8") for p in MODULES.values()})
    assert not found, "imports that go up or sideways:\n  " + "\n  ".join(found)


def test_the_check_sees_an_upward_import_inside_a_function():
    """The rule itself is checked on planted modules: a function-level relative import of the
    engine from core, an absolute import of the page from models, and an import between the
    sibling layers are each reported with file:line and both layers; a downward one is not."""
    planted = {
        DEMO / "core" / "planted.py": "def f():\n    from ..engine import arena\n",
        DEMO / "models" / "planted.py": "import demo.web.ui\n",
        DEMO / "records" / "planted.py": "x = 1\nfrom demo.calibrate import calibration\n",
        DEMO / "web" / "planted.py": "from ..engine.arena import Arena\nfrom . import render\n",
    }
    found = violations(planted)
    assert len(found) == 3, found
    assert found[0] == ("demo/core/planted.py:2: demo.core.planted (layer core) imports demo.engine.arena "
                        "(layer engine), a higher layer; move the code down or pass it in from above")
    assert found[1].startswith("demo/models/planted.py:1: demo.models.planted (layer models) imports "
                               "demo.web.ui (layer web), a higher layer")
    assert found[2].startswith("demo/records/planted.py:2: demo.records.planted (layer records) imports "
                               "demo.calibrate.calibration (layer calibrate), a sibling layer")


def test_demo_init_states_the_same_order():
    """The order written in demo/__init__.py is the one this test enforces."""
    doc = ast.get_docstring(ast.parse((DEMO / "__init__.py").read_text(encoding="utf-8"))) or ""
    line = next((l for l in doc.splitlines() if l.strip().startswith("core <")), "")
    stated = [re.findall(r"\w+", part) for part in line.split("<")]
    expected = [sorted(n for n, r in LAYERS.items() if r == rank) for rank in sorted(set(LAYERS.values()))]
    assert [sorted(s) for s in stated] == expected, f"demo/__init__.py says {line.strip()!r}"


def cycles(sources: dict[Path, str]) -> list[list[str]]:
    """Groups of modules that import each other, directly or around a loop. An import under
    `if TYPE_CHECKING:` counts too: it never runs, but the module it sits in is written
    against the one it names and calls back into it through the object it is handed (how
    formats <-> sources and arena <-> startup hid from this check); pass in a Protocol instead."""
    graph: dict[str, set[str]] = {module_name(p): set() for p in sources}
    for path, source in sources.items():
        for imp in imports(path, source):
            if imp.imported != imp.importer:
                graph[imp.importer].add(imp.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_inside_a_layer_either():
    found = cycles({p: p.read_text(encoding="utf-8") for p in MODULES.values()})
    assert not found, f"modules that import each other (inside functions too): {found}"


def test_the_cycle_check_sees_cycles_held_together_by_function_level_and_type_only_imports():
    """Inside one layer: a and b by an import in a function; c and d by an import under
    TYPE_CHECKING (as startup once named the Arena); e imports a one way only, no loop."""
    planted = {
        DEMO / "engine" / "planted_a.py": "from . import planted_b\n",
        DEMO / "engine" / "planted_b.py": "def f():\n    from .planted_a import g\n",
        DEMO / "models" / "planted_c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .planted_d import Store\n",
        DEMO / "models" / "planted_d.py": "from . import planted_c\n",
        DEMO / "engine" / "planted_e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import planted_a\n",
    }
    for path in planted:
        MODULES.setdefault(module_name(path), path)
    try:
        assert sorted(cycles(planted)) == [["demo.engine.planted_a", "demo.engine.planted_b"],
                                           ["demo.models.planted_c", "demo.models.planted_d"]]
    finally:
        for path in planted:
            MODULES.pop(module_name(path), None)


# -- lab/: imports demo, never imported by it ---------------------------------------------

LAB_NAME = re.compile(r"^lab(\.\w+)*(:\w+)?$")  # lab, lab.soak, "lab.soak:main" (a child's target)


def lab_imports(sources: dict[Path, str]) -> list[str]:
    """One sentence per import of lab (or a module or name in it) in `sources`, at any level,
    and per string that names a lab module the way a child-process target does."""
    found = []
    for path, source in sources.items():
        where = path.relative_to(DEMO.parent)
        for line, name in imported_names(path, source):
            if LAB_NAME.match(name):
                found.append(f"{where}:{line}: {module_name(path)} imports {name}")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
                    and LAB_NAME.match(node.value):
                found.append(f"{where}:{node.lineno}: {module_name(path)} names {node.value!r}")
    return found


def test_demo_never_imports_lab():
    """lab/ holds what only tests and measuring scripts use; what visitors run is demo/ (and
    app.py), so nothing there may reach into lab/, inside a function either."""
    found = lab_imports({p: p.read_text(encoding="utf-8") for p in MODULES.values()})
    assert not found, ("demo/ imports lab/ (move what it needs into demo/, or pass it in):\n  "
                       + "\n  ".join(found))


def test_the_check_sees_an_import_of_lab_at_any_level():
    planted = {
        DEMO / "web" / "planted.py": "def f():\n    from lab.soak import native_threads\n",
        DEMO / "core" / "planted.py": "import lab\nimport laboratory\nfrom demo.core import errors\n",
        DEMO / "bench" / "planted.py": "x = 'lab.paired:paired'\ny = 'lab'\nfrom lab import paired\n",
        DEMO / "engine" / "planted.py": "def g():\n    from ...lab import weights_read\n",
    }
    assert lab_imports(planted) == [
        "demo/web/planted.py:2: demo.web.planted imports lab.soak.native_threads",
        "demo/core/planted.py:1: demo.core.planted imports lab",
        "demo/bench/planted.py:3: demo.bench.planted imports lab.paired",
        "demo/bench/planted.py:1: demo.bench.planted names 'lab.paired:paired'",
        "demo/engine/planted.py:2: demo.engine.planted imports lab.weights_read",
    ]


# -- names in strings: child-process targets and python -m modules ------------------------

TARGET = re.compile(r"^demo(\.\w+)+(:\w+)?$")


def named_in_strings() -> list[tuple[str, str]]:
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and TARGET.match(node.value):
                found.append((f"{path.relative_to(DEMO.parent)}:{node.lineno}", node.value))
    return found


@pytest.mark.parametrize("where,name", named_in_strings())
def test_named_modules_and_functions_exist(where, name):
    module, _, function = name.partition(":")
    assert module in MODULES, f"{where} names {module!r}, which is no module under demo/"
    if function:
        tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        assert function in defined, f"{where} names {name!r}: {module} defines no {function!r}"


# -- size: files and functions ------------------------------------------------------------------

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# Functions over MAX_FUNCTION_LINES, each with why it is still long and the length it may not
# exceed (a ratchet: shorten a function and lower its number; a new long function fails).
LONG_FUNCTIONS: dict[str, tuple[int, str]] = {
    "demo/bench/load.py:run_load": (103, "the load test's rotation with its resume points; lab code (issue 60)"),
    "demo/calibrate/measure.py:pipeline_overhead": (101, "one stage child's timing loop over K, interleaved "
                                                         "with the baseline; its state lives in the child"),
    "demo/web/chat_tab.py:build": (85, "a tab's layout and handlers in one Blocks context"),
    "demo/calibrate/plain.py:plain_rates": (87, "one stage child's interleaved rotation of plain pipelines"),
    "demo/web/recordings_tab.py:build": (86, "a tab's layout and handlers in one Blocks context"),
    "demo/calibrate/stages.py:measure_main": (86, "one stage child: a main's curves, answers and reads, resumable"),
    "demo/serve/merge.py:merge_sides": (68, "two sides' event streams merged in one loop"),
    "demo/web/race_tab.py:stream_race": (67, "the race handler's one generator (a Gradio handler is closed "
                                             "only between two yields)"),
    "demo/serve/worker.py:run": (63, "the worker's one generator, as stream_race"),
    "demo/engine/child_side.py:_child_main": (62, "the child's command loop, in one frame by design"),
    "demo/calibrate/report.py:_measured": (62, "the report's table, one row per line"),
    "demo/cli.py:_run": (61, "the command's run and its printed summary"),
}


def functions() -> Iterator[tuple[str, int]]:
    for path in sorted(DEMO.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.relative_to(DEMO.parent)}:{node.name}", node.end_lineno - node.lineno + 1


def test_no_module_is_over_the_file_size_rule():
    long = {str(p.relative_to(DEMO.parent)): n for p in DEMO.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_over_the_function_size_rule_without_a_stated_reason():
    over = {}
    for name, lines in functions():
        allowed = LONG_FUNCTIONS.get(name, (MAX_FUNCTION_LINES, ""))[0]
        if lines > allowed:
            over[name] = lines
    assert not over, (f"over {MAX_FUNCTION_LINES} lines (or over the length LONG_FUNCTIONS allows): {over}; "
                      "split it into named steps")
    present = dict(functions())
    stale = {name: (allowed, present.get(name)) for name, (allowed, _) in LONG_FUNCTIONS.items()
             if present.get(name, 0) < allowed}
    assert not stale, f"shorter now (or gone): lower or remove their LONG_FUNCTIONS entries: {stale}"


def test_every_module_is_in_the_layout_page():
    # docs/layout.md names each module by its file name, in its folder's part of the tree (lab/'s too).
    layout = (DEMO.parent / "docs" / "layout.md").read_text()
    tree = layout[layout.index("```"):layout.rindex("```")]
    missing = [str(p.relative_to(DEMO.parent)) for p in sorted([*DEMO.rglob("*.py"), *LAB.rglob("*.py")])
               if p.name != "__init__.py" and not re.search(rf"(?<![\w/]){re.escape(p.name)}", tree)]
    assert not missing, f"docs/layout.md does not say where these live: {missing}"
