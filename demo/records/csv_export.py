"""The scoreboard as CSV: for a visitor (the page's Export CSV) and for the operator.

A visitor's export is bounded and holds no prompt text: the newest PAGE_EXPORT_ROWS rows,
without the prompt column (a kept visitor prompt is another visitor's data; an example's text
is named by its prompt class). The operator's export (`python -m demo.records export-csv`)
has every row and every kept prompt.

Every text cell is defused against formula injection (OWASP "CSV injection"): a spreadsheet
may start a cell at the value's start, or after any character some locale uses as a separator
(`,` `;` tab `|` or a line break, when the file is opened with another delimiter than ours),
and runs it as a formula when it starts with = + - @. So, reading each character in its
NFKC form (a full-width ＝ is =) and skipping spaces and quotes, an apostrophe goes before
such a character; a value that starts with one (or with a tab or a line break) gets the
apostrophe first. Text cells are always quoted.

Engine code: no Gradio, no OpenVINO.
"""

from __future__ import annotations

import csv
import unicodedata
from pathlib import Path
from typing import Optional

PAGE_EXPORT_ROWS = 5_000   # ~2.5 MB of CSV at most: enough to study, not enough to fill a disk
_FORMULA = frozenset("=+-@")
_SEPARATORS = frozenset(",;\t|\r\n")
_LEADING = frozenset("\t\r\n")   # OWASP: a cell may not start with these either


def _nfkc(ch: str) -> str:
    return unicodedata.normalize("NFKC", ch)[:1] or ch


def csv_safe(value):
    """The value with an apostrophe before every place a spreadsheet could start a formula."""
    if not isinstance(value, str):
        return value
    out: list[str] = []
    cell_start = True   # a spreadsheet may start a cell here
    first = True        # only spaces, quotes and line breaks so far: an apostrophe goes at the very start
    for ch in value:
        n = _nfkc(ch)
        if n in _SEPARATORS:
            if first and n in _LEADING:  # a value starting with a line break or tab (after spaces)
                out.insert(0, "'")
            cell_start, first = True, False
        elif cell_start and n in _FORMULA:
            out.insert(0, "'") if first else out.append("'")
            cell_start = first = False
        elif cell_start and (n.isspace() or n == '"'):
            pass
        else:
            cell_start = first = False
        out.append(ch)
    return "".join(out)


def write_csv(db, columns: list, out: Path, max_rows: Optional[int] = None,
              drop: tuple = ()) -> int:
    """Rows of the races table (oldest first; only the newest max_rows) as CSV, without the
    `drop` columns; return the number of rows written."""
    cols = [c for c in columns if c not in drop]
    where = ""
    params: tuple = ()
    if max_rows is not None:
        where = "WHERE id > COALESCE((SELECT id FROM races ORDER BY id DESC LIMIT 1 OFFSET ?), 0)"
        params = (max_rows,)
    n = 0
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        w.writerow(["id"] + cols)
        for row in db.execute(f"SELECT id, {', '.join(cols)} FROM races {where} ORDER BY id", params):
            w.writerow([csv_safe(v) for v in row])
            n += 1
    return n
