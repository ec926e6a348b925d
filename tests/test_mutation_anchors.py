"""scripts/mutation_check.py still fits the code: every mutation's anchor text occurs exactly
once in its module and every test it names exists. The mutation check itself runs after the
suite (bash scripts/test.sh); a stale anchor fails here, at once, instead of at its end.
Also its copy of the repository, restored byte for byte after each mutant. No model."""

import functools
import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the quick tier, like the files listed in conftest.FAST

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def load_script():
    """scripts/mutation_check.py as a module (importing it runs nothing: main() does)."""
    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "scripts" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_every_mutation_still_applies_and_names_tests_that_exist():
    script = load_script()
    assert len(script.MUTATIONS) >= 40
    assert script.anchor_problems() == []
    for m in script.MUTATIONS:
        assert m.path.startswith(("demo/", "lab/")) and m.old != m.new and m.tests, m.name
    assert len({m.name for m in script.MUTATIONS}) == len(script.MUTATIONS), "two mutations share a name"


def test_a_stale_anchor_and_a_renamed_test_are_reported(tmp_path):
    script = load_script()
    (tmp_path / "demo").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "demo" / "m.py").write_text("x = 1\nx = 1\ny = 2\n")
    (tmp_path / "tests" / "test_m.py").write_text("def test_y():\n    pass\n")
    m = script.Mutation
    problems = script.anchor_problems([
        m("twice", "", "demo/m.py", "x = 1", "x = 2", ("tests/test_m.py::test_y",)),
        m("gone", "", "demo/m.py", "z = 3", "z = 4", ("tests/test_m.py",)),
        m("fine", "", "demo/m.py", "y = 2", "y = 3", ("tests/test_m.py::test_y",)),
        m("renamed", "", "demo/m.py", "y = 2", "y = 3", ("tests/test_m.py::test_z", "tests/test_gone.py")),
    ], root=tmp_path)
    assert problems == [
        "twice: its anchor occurs 2 times in demo/m.py, not once",
        "gone: its anchor occurs 0 times in demo/m.py, not once",
        "renamed: no test tests/test_m.py::test_z",
        "renamed: no test tests/test_gone.py",
    ]


def test_the_copy_is_put_back_byte_for_byte_after_a_mutant(tmp_path, monkeypatch):
    """The one copy that every mutant is run in: after a run, the patched module, a file a
    test changed, bytecode and other leftovers are all gone, so no mutant leaks into the next."""
    script = load_script()
    repo, copy_dir = tmp_path / "repo", tmp_path / "copy"
    (repo / "demo").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "demo" / "m.py").write_text("def f():\n    return 1\n")
    (repo / "tests" / "test_m.py").write_text("def test_f():\n    pass\n")
    monkeypatch.setattr(script, "ROOT", repo)
    copy = script.Copy(copy_dir, ["demo/m.py", "tests/test_m.py"])
    mutation = script.Mutation("one", "", "demo/m.py", "    return 1", "    return 2", ("tests/test_m.py",))
    assert copy.apply(mutation)
    assert (copy_dir / "demo" / "m.py").read_text() == "def f():\n    return 2\n"
    assert copy.differs() == ["demo/m.py"]
    (copy_dir / "demo" / "__pycache__").mkdir()
    (copy_dir / "demo" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"stale")
    (copy_dir / "tests" / "test_m.py").write_text("changed by a test")
    (copy_dir / "artifacts" / "deep").mkdir(parents=True)
    (copy_dir / "artifacts" / "deep" / "out.json").write_text("{}")
    changed = copy.restore()
    assert sorted(changed) == ["removed artifacts/", "removed demo/__pycache__/", "rewrote demo/m.py",
                               "rewrote tests/test_m.py"]
    assert copy.differs() == [] and copy.restore() == []
    assert (copy_dir / "demo" / "m.py").read_text() == "def f():\n    return 1\n"
    assert (repo / "demo" / "m.py").read_text() == "def f():\n    return 1\n"  # the checkout is never patched


def test_only_a_failing_test_kills_a_mutant_never_a_fixture_error():
    """pytest exits 1 both for a failed assertion and for an error in a fixture; only the
    first means a test noticed the mutant."""
    from types import SimpleNamespace

    script = load_script()

    def run(rc, out, timed_out=False):
        return SimpleNamespace(rc=rc, timed_out=timed_out, output=lambda: out)

    assert script.verdict(run(1, "F\nFAILED tests/test_x.py::test_y - assert 2 == 3\n1 failed, 4 passed in 2.10s\n")) \
        == "killed"
    assert script.verdict(run(1, "E\nERROR tests/test_x.py::test_y - ValueError\n1 error in 0.52s\n")).startswith("ERROR")
    assert script.verdict(run(1, "=== 2 passed, 1 error in 3.00s ===\n")).startswith("ERROR")
    assert script.verdict(run(2, "ERROR collecting tests/test_x.py\n1 error in 0.30s\n")).startswith("ERROR")
    assert script.verdict(run(0, "5 passed in 1.00s\n")) == "SURVIVED"
    # A test that prints pytest-like words does not fool it: only the last summary line counts.
    assert script.verdict(run(1, "1 failed, 1 passed in 0.10s\nE fixture boom\n1 passed, 1 error in 0.90s\n")) \
        .startswith("ERROR")
