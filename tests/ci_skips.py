"""With CI=true a skipped test is a failure: CI installs everything the suite needs, so a
skip there means a test silently stopped running. A skip whose reason starts with one of
ALLOWED_IN_CI (a reason that holds on CI machines too) stays a skip. Loaded by conftest.py;
`python -m pytest -p tests.ci_skips` loads it alone (tests/test_ci_skips.py)."""

from __future__ import annotations

import os

import pytest

ALLOWED_IN_CI: tuple[str, ...] = ()  # none today: every test runs on CI


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _fail_unless_allowed(report) -> None:
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not reason.startswith(ALLOWED_IN_CI) or not ALLOWED_IN_CI:
        report.outcome = "failed"
        report.longrepr = f"CI=true, so this skip is a failure (CI installs everything the tests need): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_unless_allowed(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_unless_allowed(outcome.get_result())
