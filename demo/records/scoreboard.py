"""The scoreboard: every finished race, kept in an SQLite file in the cache folder.

A booth runs for days; the scoreboard answers "how much faster, usually?" with every race
this machine ran, not only the one a visitor just watched. Each finished race (both
sides done, not stopped, no error) becomes one row: preset, weight formats, method, K,
mode, greedy or sampled, token counts, tok/s, speedup, acceptance, time to first token, the
machine, and the prompt's class ("example:<preset>:<index>" for a built-in example, "visitor"
otherwise). A visitor's own prompt text is kept only when the operator asks for it
(--keep-prompts), and leaves the machine only through the operator's export (demo.records.csv_export).

Standings compare like with like: one group per preset, prompt class, method, mode, K (or
threshold), greedy or sampled, and whether the race had the default length, so 50 races of
one token, at temperature 2 or with K = 16 make groups of their own and move no other.

The database is stdlib sqlite3 in WAL mode with a busy timeout, so several page processes
(or a page and `python -m demo.record`) can write at once; each call opens its own
connection, so threads never share one. The schema is versioned with PRAGMA user_version,
and the table keeps the newest MAX_ROWS rows. Nothing here may break a race: every
failure (a damaged file, a lock held too long, a folder that cannot be written) is a
ScoreboardError with one sentence that the page shows as a warning while the race goes on.

Pure engine code: no Gradio, no OpenVINO.
"""

from __future__ import annotations

import logging
import sqlite3
import statistics
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Optional, Sequence

from ..core.errors import DemoError
from ..core.settings import GenerationSettings
from .csv_export import PAGE_EXPORT_ROWS, write_csv

FILE_NAME = "scoreboard.sqlite"
SCHEMA_VERSION = 2               # raised with each new column; an older file gains it on open (_migrate)
MAX_ROWS = 50_000
BUSY_TIMEOUT_S = 3.0
MAX_STORED_PROMPT_CHARS = 2_000  # with --keep-prompts: enough to recognise a prompt, bounded per row
VISITOR = "visitor"
log = logging.getLogger(__name__)
DEFAULT_MAX_NEW_TOKENS = GenerationSettings.max_new_tokens  # the page's default length


class ScoreboardError(DemoError):
    """The scoreboard could not be read or written; the race itself is not affected."""


@dataclass(frozen=True)
class RaceRecord:
    """One finished race, as one row of the scoreboard (a three-way race gives two: the
    draft model and prompt lookup, each against the same baseline)."""

    preset: str
    method: str                          # draft | prompt_lookup
    mode: str                            # race | fair | three-way
    prompt_class: str                    # example:<preset>:<index> | three-way:<index> | visitor
    baseline_tokens: int
    speculative_tokens: int
    baseline_tok_s: float
    speculative_tok_s: float
    speedup: Optional[float]
    main_format: Optional[str] = None
    draft_format: Optional[str] = None
    assistant_tokens: Optional[int] = None
    confidence_threshold: Optional[float] = None
    max_new_tokens: Optional[int] = None
    sampling: Optional[bool] = None      # None: recorded before schema 2 (not known)
    acceptance: Optional[float] = None   # OpenVINO's accepted / drafted
    baseline_ttft_ms: Optional[float] = None
    speculative_ttft_ms: Optional[float] = None
    verdict: Optional[str] = None        # identical | diverged at token N
    cpu_model: Optional[str] = None
    isa_flags: Optional[str] = None      # space-separated, e.g. "avx2 avx512f"
    cores: Optional[int] = None
    prompt: Optional[str] = None         # only with --keep-prompts (or an example's own text)
    created: float = 0.0                 # unix time; 0 = now, when recorded


COLUMNS = [f.name for f in fields(RaceRecord)]
_SQL_TYPES = {
    "preset": "TEXT NOT NULL", "method": "TEXT NOT NULL", "mode": "TEXT NOT NULL",
    "prompt_class": "TEXT NOT NULL", "baseline_tokens": "INTEGER NOT NULL",
    "speculative_tokens": "INTEGER NOT NULL", "baseline_tok_s": "REAL NOT NULL",
    "speculative_tok_s": "REAL NOT NULL", "speedup": "REAL", "main_format": "TEXT", "draft_format": "TEXT",
    "assistant_tokens": "INTEGER", "confidence_threshold": "REAL", "max_new_tokens": "INTEGER",
    "sampling": "INTEGER",
    "acceptance": "REAL", "baseline_ttft_ms": "REAL", "speculative_ttft_ms": "REAL", "verdict": "TEXT",
    "cpu_model": "TEXT", "isa_flags": "TEXT", "cores": "INTEGER", "prompt": "TEXT", "created": "REAL NOT NULL",
}
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS races (id INTEGER PRIMARY KEY, "
    + ", ".join(f"{c} {_SQL_TYPES[c]}" for c in COLUMNS) + ")"
)


@dataclass(frozen=True)
class Group:
    """The speedups of one configuration: preset, prompt class, method, mode, K or threshold,
    greedy or sampled, default length or not."""

    preset: str
    prompt_class: str
    method: str
    speedups: tuple[float, ...]   # sorted
    mode: str = "race"
    assistant_tokens: Optional[int] = None
    confidence_threshold: Optional[float] = None
    sampling: Optional[bool] = False     # None: not recorded (rows from before schema 2)
    default_length: bool = True          # max_new_tokens == DEFAULT_MAX_NEW_TOKENS

    @property
    def count(self) -> int:
        return len(self.speedups)

    @property
    def median(self) -> float:
        return statistics.median(self.speedups)

    def quantile(self, q: float) -> float:
        """Linear interpolation between the sorted values (q in [0, 1])."""
        s = self.speedups
        pos = q * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class Standings:
    """What the Scoreboard tab shows: every row counted, speedups grouped."""

    total: int            # rows in the table (with or without a speedup)
    groups: list[Group]
    newest_id: int        # changes whenever a race is added: the page re-renders only then


def prompt_class(prompt: str, preset_name: str, preset_examples: Sequence[str],
                 named_examples: Sequence[tuple[str, Sequence[str]]] = ()) -> str:
    """"example:<preset>:<index>" for one of the preset's examples, "<name>:<index>" for one
    of another built-in list (e.g. the three-way race's), else "visitor".

    Decided on the server from the text itself, so an API caller cannot file a visitor's
    prompt under an example (sending the example's exact text is running the example).
    """
    for i, example in enumerate(preset_examples):
        if prompt == example:
            return f"example:{preset_name}:{i}"
    for name, examples in named_examples:
        for i, example in enumerate(examples):
            if prompt == example:
                return f"{name}:{i}"
    return VISITOR


class Scoreboard:
    """The scoreboard file. Cheap to create: nothing touches the disk until the first call."""

    def __init__(self, path: Path, keep_prompts: bool = False, max_rows: int = MAX_ROWS,
                 busy_timeout_s: float = BUSY_TIMEOUT_S):
        self.path = Path(path)
        self.keep_prompts = keep_prompts
        self.max_rows = max_rows
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._cache: Optional[Standings] = None

    @classmethod
    def in_cache(cls, cache_dir: Path, **kwargs) -> "Scoreboard":
        return cls(Path(cache_dir) / FILE_NAME, **kwargs)

    # -- writing ------------------------------------------------------------------------
    def record(self, rows: Sequence[RaceRecord]) -> list[int]:
        """Add finished races (one transaction); return their row ids.

        Visitors' prompts are dropped unless keep_prompts; the table is trimmed to the
        newest max_rows rows in the same transaction.
        """
        now = time.time()
        values = []
        for row in rows:
            data = asdict(row)
            if not data["created"]:
                data["created"] = now
            if data["prompt"] is not None:
                if data["prompt_class"] == VISITOR and not self.keep_prompts:
                    data["prompt"] = None
                else:
                    data["prompt"] = data["prompt"][:MAX_STORED_PROMPT_CHARS]
            values.append([data[c] for c in COLUMNS])
        with self._connect() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                ids = []
                for v in values:
                    cur = db.execute(f"INSERT INTO races ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", v)
                    ids.append(cur.lastrowid)
                db.execute("DELETE FROM races WHERE id <= (SELECT id FROM races ORDER BY id DESC LIMIT 1 OFFSET ?)",
                           (self.max_rows,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return ids

    # -- reading ------------------------------------------------------------------------
    def standings(self) -> Standings:
        """Counts and speedups per configuration (Group), cached until a race is added."""
        with self._connect() as db:
            newest, total = db.execute("SELECT COALESCE(MAX(id), 0), COUNT(*) FROM races").fetchone()
            cached = self._cache
            if cached is not None and cached.newest_id == newest and cached.total == total:
                return cached
            grouped: dict[tuple, list[float]] = {}
            for *key, tokens, s in db.execute(
                    "SELECT preset, prompt_class, method, mode, assistant_tokens, confidence_threshold, sampling, "
                    "max_new_tokens, speedup FROM races WHERE speedup IS NOT NULL"):
                key[5] = round(key[5], 2) if key[5] is not None else None  # the slider's step
                key[6] = bool(key[6]) if key[6] is not None else None
                grouped.setdefault((*key, tokens == DEFAULT_MAX_NEW_TOKENS), []).append(float(s))
        groups = [Group(p, c, m, tuple(sorted(v)), mode, k, th, smp, default)
                  for (p, c, m, mode, k, th, smp, default), v in sorted(grouped.items(), key=_group_order)]
        self._cache = Standings(total=total, groups=groups, newest_id=newest)
        return self._cache

    def export_csv(self, out: Path, for_operator: bool = False) -> int:
        """Write the table as CSV (demo.records.csv_export); return the number of rows.

        For a visitor (the page): the newest PAGE_EXPORT_ROWS rows, no prompt text. For the
        operator: every row and every kept prompt.
        """
        with self._connect() as db:
            if for_operator:
                return write_csv(db, COLUMNS, out)
            return write_csv(db, COLUMNS, out, max_rows=PAGE_EXPORT_ROWS, drop=("prompt",))

    # -- the connection -------------------------------------------------------------------
    def _connect(self) -> "_Connection":
        return _Connection(self)

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                                 check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise self._error(e) from None
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            # Every time, not once: an operator may move a damaged file aside while we run.
            with self._lock:
                self._migrate(db)
        except BaseException as e:
            db.close()
            if isinstance(e, (sqlite3.Error, OSError)):
                raise self._error(e) from None
            raise
        return db

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            log.warning("scoreboard %s: schema %s is newer than this demo's %s", self.path, version, SCHEMA_VERSION)
            raise ScoreboardError(
                f"The scoreboard database was written by a newer version of this demo (schema {version}); this "
                "race was not recorded: upgrade the demo or move that file aside (its path is in the server log).")
        if version == SCHEMA_VERSION:
            return
        # WAL: readers never block the writer, and a crash never leaves a half-written row.
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]  # another process may have won
            if version == 0:
                db.execute(_SCHEMA)
            elif version == 1:  # schema 1 had no sampling column: its rows stay "not known"
                db.execute("ALTER TABLE races ADD COLUMN sampling INTEGER")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _error(self, e: BaseException) -> ScoreboardError:
        if isinstance(e, ScoreboardError):
            return e
        text = " ".join(str(e).split()) or type(e).__name__
        # The path and SQLite's words go to the server log; the page gets a sentence without them.
        log.warning("scoreboard %s: %s: %s", self.path, type(e).__name__, text)
        if isinstance(e, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return ScoreboardError(
                f"The scoreboard database is busy (another process kept it locked for over "
                f"{self.busy_timeout_s:g} s); this race was not recorded, and the next one will try again.")
        if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError):
            return ScoreboardError(
                "The scoreboard database is damaged, so this race was not recorded: the operator can move that "
                "file aside (its path is in the server log) and a new scoreboard starts.")
        return ScoreboardError(
            "The scoreboard database cannot be used, so this race was not recorded: the operator can check "
            "that the cache folder is writable (the details are in the server log).")


class _Connection:
    """`with scoreboard._connect() as db:` — one connection per call, every sqlite3 error
    turned into a ScoreboardError, always closed."""

    def __init__(self, board: Scoreboard):
        self.board = board
        self.db: Optional[sqlite3.Connection] = None

    def __enter__(self) -> sqlite3.Connection:
        self.db = self.board._open()
        return self.db

    def __exit__(self, kind, error, tb) -> bool:
        if self.db is not None:
            self.db.close()
        if error is not None and isinstance(error, (sqlite3.Error, OSError)):
            raise self.board._error(error) from None
        return False


def race_record(*, preset: str, method: str, mode: str, prompt: str, prompt_class: str, baseline, speculative,
                settings, main_format: Optional[str] = None, draft_format: Optional[str] = None,
                machine: Optional[dict] = None) -> RaceRecord:
    """One row from a finished race's two RunResults (demo.core.streaming) and its settings."""
    from ..core.metrics import compare

    c = compare(baseline, speculative)
    b, s = c.baseline, c.speculative
    machine = machine or {}
    return RaceRecord(
        preset=preset, method=method, mode=mode, prompt_class=prompt_class,
        baseline_tokens=b.tokens, speculative_tokens=s.tokens,
        baseline_tok_s=b.tokens_per_s, speculative_tok_s=s.tokens_per_s, speedup=c.speedup,
        main_format=main_format, draft_format=draft_format,
        assistant_tokens=settings.assistant_tokens, confidence_threshold=settings.confidence_threshold,
        max_new_tokens=settings.max_new_tokens, sampling=bool(settings.sampling),
        acceptance=c.acceptance_rate,
        baseline_ttft_ms=b.ttft_s * 1000 if b.ttft_s is not None else None,
        speculative_ttft_ms=s.ttft_s * 1000 if s.ttft_s is not None else None,
        verdict=c.verdict,
        cpu_model=machine.get("cpu_model"), isa_flags=" ".join(machine.get("isa_flags") or ()) or None,
        cores=machine.get("cores"), prompt=prompt,
    )


def _group_order(item) -> tuple:
    """By preset, prompt class, method, mode (race first); then default length, greedy, K before thresholds."""
    (p, c, m, mode, k, th, smp, default), _ = item
    return (p, c, m, _MODES.get(mode, len(_MODES)), mode, not default, smp is not False, k is None, k or 0, th or 0.0)


_MODES = {"race": 0, "fair": 1, "three-way": 2}  # the page's default first
