"""Figures are generated from their records, never typed (issue 59, item 1): scripts/figures.py
--check passes on the repository, and fails when one number in README.md is edited by hand,
when a figure is typed outside the generated blocks, or when a headline raced a calibration prompt."""

import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("figures", ROOT / "scripts" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def copy(tmp_path):
    """A copy of the documents beside the real records."""
    for doc in ("README.md", "BENCHMARKS.md"):
        shutil.copy(ROOT / doc, tmp_path / doc)
    (tmp_path / "docs").mkdir()
    for doc in (ROOT / "docs").glob("*.md"):
        shutil.copy(doc, tmp_path / "docs" / doc.name)
    (tmp_path / "docs" / "measurements").symlink_to(ROOT / "docs" / "measurements")
    (tmp_path / "bench-results").symlink_to(ROOT / "bench-results")
    return tmp_path


def test_check_passes_on_the_repository():
    done = subprocess.run([sys.executable, "scripts/figures.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_number_edited_by_hand_fails_the_check(figures, copy):
    readme = copy / "README.md"
    text = readme.read_text()
    start = text.index("<!-- figures:per-cpu -->")
    at = start + text[start:].index(" tok/s**") - 1  # the last digit of the speculative rate
    edited = text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:]
    readme.write_text(edited)
    assert any("per-cpu" in p for p in figures.problems(copy)), "an edited rate passed the check"


def test_a_figure_typed_outside_the_blocks_fails_the_check(figures, copy):
    readme = copy / "README.md"
    readme.write_text(readme.read_text() + "\nOn my laptop it ran 1.62× faster.\n")
    assert any("1.62×" in p for p in figures.problems(copy))


def test_a_headline_on_a_calibration_prompt_is_refused(figures, tmp_path):
    fair_name, race_name = next(iter(figures.HEADLINES.values()))
    (tmp_path / "bench-results").mkdir()
    for name in (fair_name, race_name):
        data = json.loads((ROOT / "bench-results" / name).read_text())
        if name == fair_name:
            data["prompts"] = ["code-1", *data["prompts"][1:]]
        (tmp_path / "bench-results" / name).write_text(json.dumps(data))
    with pytest.raises(SystemExit, match="calibration's prompt code-1"):
        figures.per_cpu(tmp_path)


def test_the_headline_ratio_is_the_raw_samples_own(figures):
    # Independently of lab.paired: each sample's speculative decode rate over the fastest plain
    # OpenVINO rate, every engine cut at the shortest answer, from the token arrival times themselves.
    fair_name, _ = next(iter(figures.HEADLINES.values()))
    data = json.loads((ROOT / "bench-results" / fair_name).read_text())
    plains = [e for e in data["summary"] if e.startswith(("baseline", "plain_")) and "decode_tok_s" in data["summary"][e]]
    ratios = []
    for s in data["samples"]:
        n = min(len(s["times"][e]) for e in ["speculative", *plains])
        rate = {e: (n - 1) / (s["times"][e][n - 1] - s["times"][e][0]) for e in ["speculative", *plains]}
        ratios.append(rate["speculative"] / max(rate[e] for e in plains))
    readme = (ROOT / "README.md").read_text()
    assert f"**{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}×)**" in readme


def test_each_record_s_class_is_the_one_its_file_is_named_for(figures):
    # The class a file's name claims (its tag) against the class its own machine record reads as.
    claims = {"zen4": "AMD EPYC Zen 4", "xeon-amx": "Intel Xeon with AMX"}
    names = [*(n for kinds in figures.LAUNCHES.values() for kind in kinds.values() for n in kind), *(name for name, _ in figures.FREE_DRAFTS.values()),
             *(n for pair in figures.HEADLINES.values() for n in pair)]
    for name in names:
        machine = json.loads((ROOT / "bench-results" / name).read_text())["machine"]
        tags = [tag for tag in claims if f"-{tag}-" in name]
        assert len(tags) == 1, f"{name} names no CPU class the test knows"
        assert figures.cpu_class(machine) == claims[tags[0]], name


def test_a_figure_in_docs_needs_its_dated_record(figures, copy):
    """docs/ explain; a measured figure there stands only beside the dated record it comes from."""
    speed = copy / "docs" / "speed.md"
    speed.write_text(speed.read_text() + "\nOn a Zen 4 a verify of 6 tokens costs 1.4× one.\n")
    assert any("speed.md" in p and "1.4×" in p for p in figures.problems(copy))
    cited = "On a Zen 4 a verify of 6 tokens costs 1.4× one (`bench-results/verify-cost-zen4-2026-12-06.json`).\n"
    speed.write_text(speed.read_text().rsplit("\nOn a Zen 4", 1)[0] + "\n" + cited)
    assert not figures.problems(copy)
    speed.write_text(speed.read_text().replace("verify-cost-zen4-2026-12-06", "verify-cost-zen4-2026-12-31"))
    assert any("not there" in p for p in figures.problems(copy)), "a record that does not exist was accepted"


def test_a_rule_the_docs_quote_follows_the_code(figures, monkeypatch):
    """The thresholds docs/ state (tie margins, the quality floor) are read from the code's constants."""
    from demo.calibrate import cost_model, measure

    assert not figures.rule_problems()
    monkeypatch.setattr(measure, "MIN_AGREEMENT", 0.85)
    monkeypatch.setattr(cost_model, "TIE_MARGIN", 0.05)
    found = figures.rule_problems()
    assert any("MIN_AGREEMENT" in p for p in found) and any("TIE_MARGIN" in p for p in found)

