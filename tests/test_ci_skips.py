"""The conftest hook that turns a skip into a failure on CI (tests/ci_skips.py)."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SKIPPING = '''
import pytest

def test_skips_in_the_body():
    pytest.skip("needs something not installed")

@pytest.mark.skipif(True, reason="a decorator's reason")
def test_skipped_by_a_decorator():
    pass

def test_passes():
    pass
'''
SKIPPING_MODULE = '''
import pytest
pytest.skip("a whole module needs something", allow_module_level=True)
'''


def _run(tmp_path: Path, ci: str, module_skip: bool = False) -> subprocess.CompletedProcess:
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    if module_skip:
        (tmp_path / "test_skipping_module.py").write_text(SKIPPING_MODULE)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.ci_skips", "-p", "no:cacheprovider",
                           "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_on_ci_every_skip_is_a_failure_that_says_why(tmp_path):
    out = _run(tmp_path, "true")
    assert out.returncode == 1 and "1 failed, 1 passed, 1 error" in out.stdout, out.stdout  # a skipif skips in setup
    assert "CI=true, so this skip is a failure" in out.stdout
    assert "needs something not installed" in out.stdout and "a decorator's reason" in out.stdout
    whole = _run(tmp_path, "true", module_skip=True)  # a module that skips itself stops the run
    assert whole.returncode != 0 and "a whole module needs something" in whole.stdout, whole.stdout


def test_off_ci_a_skip_stays_a_skip(tmp_path):
    out = _run(tmp_path, "", module_skip=True)
    assert out.returncode == 0 and "1 passed, 3 skipped" in out.stdout, out.stdout
