"""demo.records.scoreboard: the SQLite file every finished race is written to.

Read back with sqlite3 itself (not through the module), and abused the ways a booth will:
several writers at once, a damaged file, a lock held too long, a newer schema.
"""

import contextlib
import csv
import multiprocessing
import sqlite3
import threading

import pytest

from demo.records.scoreboard import (
    MAX_STORED_PROMPT_CHARS, SCHEMA_VERSION, RaceRecord, Scoreboard, ScoreboardError, prompt_class,
)


def row(i=0, **kw) -> RaceRecord:
    base = dict(preset="p", method="draft", mode="race", prompt_class="visitor", baseline_tokens=10 + i,
                speculative_tokens=10 + i, baseline_tok_s=10.0, speculative_tok_s=10.0 + i, speedup=1.0 + i / 10)
    base.update(kw)
    return RaceRecord(**base)


def read(path):
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM races ORDER BY id")]


def test_rows_schema_version_and_wal(tmp_path):
    board = Scoreboard(tmp_path / "s.sqlite")
    ids = board.record([row(1), row(2, prompt_class="example:p:0", prompt="An example")])
    rows = read(board.path)
    assert [r["id"] for r in rows] == ids
    assert [r["speculative_tokens"] for r in rows] == [11, 12]
    assert rows[1]["prompt"] == "An example" and rows[0]["created"] > 0
    with contextlib.closing(sqlite3.connect(board.path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_visitor_prompts_are_kept_only_when_asked(tmp_path):
    Scoreboard(tmp_path / "a.sqlite").record([row(prompt="my secret question")])
    assert read(tmp_path / "a.sqlite")[0]["prompt"] is None
    Scoreboard(tmp_path / "b.sqlite", keep_prompts=True).record([row(prompt="x" * 5000)])
    assert read(tmp_path / "b.sqlite")[0]["prompt"] == "x" * MAX_STORED_PROMPT_CHARS


def test_keeps_only_the_newest_rows(tmp_path):
    board = Scoreboard(tmp_path / "s.sqlite", max_rows=5)
    for i in range(12):
        board.record([row(i)])
    rows = read(board.path)
    assert [r["baseline_tokens"] for r in rows] == [10 + i for i in range(7, 12)]


def test_standings_group_and_count(tmp_path):
    board = Scoreboard(tmp_path / "s.sqlite")
    board.record([row(i, prompt_class="example:p:0") for i in range(5)] + [row(1, method="prompt_lookup")]
                 + [row(0, speedup=None)])
    s = board.standings()
    assert s.total == 7
    groups = {(g.prompt_class, g.method): g for g in s.groups}
    g = groups[("example:p:0", "draft")]
    assert g.count == 5 and g.median == pytest.approx(1.2) and g.speedups == tuple(sorted(g.speedups))
    assert groups[("visitor", "prompt_lookup")].count == 1
    assert sum(g.count for g in s.groups) == 6  # the row without a speedup is counted in the total only
    assert board.standings() is s  # nothing new: the cached standings
    board.record([row(3)])
    assert board.standings().total == 8


def _writer(path, n, start):
    board = Scoreboard(path)
    for i in range(n):
        board.record([row(start + i)])


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "s.sqlite"
    Scoreboard(path).record([row(0)])  # created first; processes then race on the writes
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 15, 1000 * (k + 1))) for k in range(3)]
    threads = [threading.Thread(target=_writer, args=(path, 15, 100 * (k + 1))) for k in range(3)]
    for w in procs + threads:
        w.start()
    for w in procs + threads:
        w.join(120)
    assert all(p.exitcode == 0 for p in procs)
    rows = read(path)
    assert len(rows) == 1 + 6 * 15
    assert len({r["baseline_tokens"] for r in rows}) == len(rows)


def test_a_damaged_file_is_one_sentence(tmp_path):
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"this is not a database at all" * 100)
    board = Scoreboard(path)
    with pytest.raises(ScoreboardError) as info:
        board.record([row()])
    msg = str(info.value)
    assert "is damaged" in msg and "move that file aside" in msg and "\n" not in msg
    with pytest.raises(ScoreboardError, match="is damaged"):
        board.standings()
    path.unlink()  # the operator moves it aside: a new scoreboard starts
    board.record([row()])
    assert len(read(path)) == 1


def test_a_lock_held_too_long_is_one_sentence(tmp_path):
    path = tmp_path / "s.sqlite"
    board = Scoreboard(path, busy_timeout_s=0.3)
    board.record([row()])
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ScoreboardError, match="busy .* this race was not recorded"):
            board.record([row()])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    board.record([row()])
    assert len(read(path)) == 2


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(ScoreboardError, match="newer version of this demo"):
        Scoreboard(path).record([row()])


def test_an_unwritable_folder_is_one_sentence(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ScoreboardError, match="cannot be used"):
        Scoreboard(blocker / "sub" / "s.sqlite").record([row()])


def test_csv_export_matches_the_table_and_defuses_formulas(tmp_path):
    board = Scoreboard(tmp_path / "s.sqlite", keep_prompts=True)
    board.record([row(1, prompt="=HYPERLINK(\"http://x\")"), row(2, prompt="+1"), row(3, prompt="plain")])
    out = tmp_path / "s.csv"
    assert board.export_csv(out, for_operator=True) == 3
    with open(out, newline="") as f:
        got = list(csv.DictReader(f))
    db = read(board.path)
    assert [int(r["id"]) for r in got] == [r["id"] for r in db]
    assert [r["prompt"] for r in got] == ["'=HYPERLINK(\"http://x\")", "'+1", "plain"]
    assert [float(r["speedup"]) for r in got] == [r["speedup"] for r in db]


def test_prompt_class_is_decided_from_the_text():
    examples = ["first", "second"]
    assert prompt_class("second", "p", examples) == "example:p:1"
    assert prompt_class("second ", "p", examples) == "visitor"
    assert prompt_class("edit", "p", examples, [("three-way", ["x", "edit"])]) == "three-way:1"


# -- issue 21: the CSV guard, exports without other visitors' prompts, like with like --------

NASTY = [
    "=1+1", "+1", "-1", "@SUM(A1)", "\t=1", "\r=1", "\n=1", "\r\n@x", " =1", "\u3000=1", "  \n  -2",
    "＝1+1", "＋cmd", "＠x", "x;=cmd|' /C calc'!A0", "x,=1", "x, +1", "x\n=1", "x\t@y", "x|-1",
    "a；＝1", "a，＋1", 'x;"=1"', "x; \"  =1", "-", "=",
]


def _formula_starts(text: str) -> list[str]:
    """Every place a spreadsheet could start a cell in `text` (its start, or after a character
    some locale splits on), in NFKC form, without leading spaces and quotes, that is a formula."""
    import re
    import unicodedata

    norm = unicodedata.normalize("NFKC", text)
    pieces = re.split(r"[,;\t|\r\n]", norm)
    return [p for p in pieces if p.lstrip(" \u3000\"")[:1] in ("=", "+", "-", "@")]


@pytest.mark.parametrize("cell", NASTY)
def test_csv_guard_defuses_every_place_a_formula_could_start(cell):
    from demo.records.csv_export import csv_safe

    safe = csv_safe(cell)
    assert _formula_starts(cell), "this case no longer holds a formula start: it tests nothing"
    assert _formula_starts(safe) == [], f"{cell!r} -> {safe!r}"
    assert safe.replace("'", "") == cell.replace("'", "")  # defused by apostrophes only: the text is kept
    if cell[:1] in ("\t", "\r", "\n", " ", "\u3000", "=", "＝", "+", "-", "@"):
        assert safe.startswith("'"), f"{cell!r} -> {safe!r}: the apostrophe must come first"


def test_the_written_file_holds_no_formula_under_any_delimiter(tmp_path):
    board = Scoreboard(tmp_path / "s.sqlite", keep_prompts=True)
    board.record([row(i, prompt=cell, cpu_model=cell) for i, cell in enumerate(NASTY)])
    out = tmp_path / "s.csv"
    board.export_csv(out, for_operator=True)
    with open(out, newline="", encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    assert [r["cpu_model"].replace("'", "") for r in got] == [c.replace("'", "") for c in NASTY]  # one cell each
    for r in got:
        assert _formula_starts(r["prompt"]) == [] and _formula_starts(r["cpu_model"]) == []
    # Opened with another delimiter (`;`, tab), split naively: still no cell starts a formula.
    raw = out.read_text(encoding="utf-8")
    assert _formula_starts(raw.replace('"', "")) == []


def test_the_page_export_holds_no_prompt_text_and_is_bounded(tmp_path, monkeypatch):
    from demo.records import csv_export

    board = Scoreboard(tmp_path / "s.sqlite", keep_prompts=True)
    board.record([row(i, prompt=f"visitor secret {i}") for i in range(30)]
                 + [row(99, prompt_class="example:p:0", prompt="An example")])
    monkeypatch.setattr(csv_export, "PAGE_EXPORT_ROWS", 10)
    monkeypatch.setattr("demo.records.scoreboard.PAGE_EXPORT_ROWS", 10)
    out = tmp_path / "page.csv"
    assert board.export_csv(out) == 10
    text = out.read_text(encoding="utf-8")
    assert "secret" not in text and "prompt" not in next(csv.reader(open(out, newline="")))
    ids = [int(r["id"]) for r in csv.DictReader(open(out, newline=""))]
    assert ids == list(range(22, 32))  # the newest ten, oldest first
    full = tmp_path / "operator.csv"
    assert board.export_csv(full, for_operator=True) == 31
    assert "visitor secret 0" in full.read_text(encoding="utf-8")


def _default(**kw):
    return dict(prompt_class="example:p:0", assistant_tokens=4, max_new_tokens=128, sampling=False, **kw)


def test_skewed_races_do_not_move_the_default_standing(tmp_path):
    board = Scoreboard(tmp_path / "s.sqlite")
    board.record([row(i, **_default()) for i in range(5)])  # speedups 1.0 .. 1.4
    before = [g for g in board.standings().groups if g.count == 5]
    assert len(before) == 1 and before[0].median == pytest.approx(1.2)
    skew = []
    for i in range(50):  # one token each, sampling at temperature 2, or K = 16: all "fast"
        skew.append(row(i, speedup=9.0, **dict(_default(), max_new_tokens=1)))
        skew.append(row(i, speedup=9.0, **dict(_default(), sampling=True)))
        skew.append(row(i, speedup=9.0, **dict(_default(), assistant_tokens=16)))
        skew.append(row(i, speedup=9.0, mode="fair", **_default()))
        skew.append(row(i, speedup=9.0, **dict(_default(), assistant_tokens=None, confidence_threshold=0.9)))
    board.record(skew)
    groups = board.standings().groups
    default = [g for g in groups if g.assistant_tokens == 4 and g.sampling is False and g.default_length
               and g.mode == "race"]
    assert len(default) == 1
    assert default[0].count == 5 and default[0].median == pytest.approx(1.2)
    assert len(groups) == 6 and groups[0] == default[0]  # the default configuration is listed first
    assert {g.count for g in groups[1:]} == {50}


def test_a_schema_1_file_gains_the_sampling_column(tmp_path):
    path = tmp_path / "s.sqlite"
    cols = [c for c in __import__("demo.records.scoreboard", fromlist=["COLUMNS"]).COLUMNS if c != "sampling"]
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE races (id INTEGER PRIMARY KEY, " + ", ".join(cols) + ")")
        db.execute("INSERT INTO races (preset, method, mode, prompt_class, baseline_tokens, speculative_tokens, "
                   "baseline_tok_s, speculative_tok_s, speedup, created) VALUES ('p', 'draft', 'race', 'visitor', "
                   "1, 1, 1.0, 2.0, 2.0, 1.0)")
        db.execute("PRAGMA user_version = 1")
        db.commit()
    board = Scoreboard(path)
    board.record([row(1, sampling=True)])
    rows = read(path)
    assert [r["sampling"] for r in rows] == [None, 1]
    assert {g.sampling for g in board.standings().groups} == {None, True}


def test_scoreboard_sentences_name_no_path(tmp_path):
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(ScoreboardError) as info:
        Scoreboard(path).standings()
    assert str(tmp_path) not in str(info.value) and "/" not in str(info.value)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ScoreboardError) as info:
        Scoreboard(blocker / "sub" / "s.sqlite").record([row()])
    assert str(tmp_path) not in str(info.value) and "/" not in str(info.value)


def test_the_operator_exports_every_row_and_prompt_from_the_command_line(tmp_path, capsys):
    from demo.records.__main__ import main

    board = Scoreboard(tmp_path / "scoreboard.sqlite", keep_prompts=True)
    board.record([row(i, prompt=f"visitor text {i}") for i in range(3)])
    out = tmp_path / "all.csv"
    assert main(["export-csv", str(out), "--cache-dir", str(tmp_path)]) == 0
    got = list(csv.DictReader(open(out, newline="", encoding="utf-8")))
    assert [r["prompt"] for r in got] == [f"visitor text {i}" for i in range(3)]
    assert main(["export-csv", str(out), "--cache-dir", str(tmp_path / "nowhere")]) == 1
    assert "There is no scoreboard at" in capsys.readouterr().err
