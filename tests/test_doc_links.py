"""Every relative link in the project's markdown (README.md, the other top-level pages, docs/)
points at a file that exists, and every #anchor at a heading of that file, as GitHub makes
anchors from headings. Pure text: no model, no network, milliseconds.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
# docs/_incoming/: notes waiting to be folded into these pages, not pages themselves.
PAGES = sorted(ROOT.glob("*.md")) + [ROOT / "scripts" / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md") if "_incoming" not in p.parts)

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans removed."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", "", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, links reduced to their text, every
    character but letters, digits, '_', '-' and spaces dropped, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    kept = (c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LM" or unicodedata.category(c) == "Nd")
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            name, n = base, 0
            while name in found:  # GitHub numbers repeated headings: name, name-1, name-2
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def broken_links(page: Path, text: str) -> list[str]:
    """One line per relative link in `text` (the page at `page`) whose file or anchor is missing."""
    bad = []
    for n, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{n}: {target}"
            if path and not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(
                    dest.read_text(encoding="utf-8") if path else text):
                bad.append(f"{where}: {dest.name} has no heading with the anchor #{anchor}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page):
    bad = broken_links(page, page.read_text(encoding="utf-8"))
    assert not bad, "broken links:\n  " + "\n  ".join(bad)


def test_the_pages_are_found_and_link_to_each_other():
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    assert {"README.md", "BENCHMARKS.md", "RELIABILITY.md"} <= names and any(n.startswith("docs/") for n in names)
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve()
              for _, line in prose_lines(readme.read_text(encoding="utf-8")) for t in LINK.findall(line)}
    unreachable = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not unreachable, f"docs pages README.md does not link to: {unreachable}"


def test_the_check_sees_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Speed that fits the machine\n\n## Why `K` × 2?\n\n## Why `K` × 2?\n")
    page = tmp_path / "page.md"
    text = ("[ok](other.md#speed-that-fits-the-machine) [ok](other.md#why-k--2-1) [self](#a-title)\n"
            "# A title\n"
            "[gone](missing.md) ![gone](img/none.png) [bad](other.md#speed) [nothing](#a-titl) [web](https://example.com/x.md)\n"
            "```\n[in code](missing-too.md)\n```\n`[inline](missing-three.md)`\n")
    bad = broken_links(page, text)
    assert [b.split(": ", 1)[1] for b in bad] == [
        "missing.md: no such file",
        "img/none.png: no such file",
        "other.md#speed: other.md has no heading with the anchor #speed",
        "#a-titl: page.md has no heading with the anchor #a-titl",
    ], bad


COUNTER = re.compile(r"(?<![A-Za-z0-9_/.-])s\d{2}(?:-[a-z]+)?\b|\b[Ss]tops? \d{2}\b"
                     r"|\b[Tt]he stop (?:after|before)\b|\bnext stop\b|\bthis stop\b")


def test_measurements_are_named_by_date_not_by_an_internal_counter():
    """Issue 59, item 8: a reader cannot tell when or where "s55" or "stop 55" was measured;
    result files and the pages name the date and time of their runs."""
    counted = sorted(p.name for p in (ROOT / "bench-results").iterdir() if re.search(r"-s\d{2}(?=[-.])", p.name))
    assert counted == [], f"result files named by a counter: {counted[:5]}"
    undated = sorted(p.name for p in (ROOT / "bench-results").iterdir() if not re.search(r"\d{4}-\d{2}-\d{2}", p.name))
    assert undated == [], f"result files without the date of their run in the name: {undated[:5]}"
    found = [(page.name, n) for page in PAGES for n, line in enumerate(page.read_text().splitlines(), 1)
             if COUNTER.search(line)]
    assert found == [], f"a counter where a date belongs: {found[:5]}"
