"""Issue 21, as a stranger sends it: uploads, exports, other visitors' prompts, huge numbers and
internals, through raw HTTP on the launched page (no model is loaded: these are refused or
answered before any run, or run on fake runners).

The page runs on a scratch cache (the session's prepared fixture, symlinked) with its own
Gradio folder (GRADIO_TEMP_DIR), so what it leaves on disk can be counted exactly.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from demo.core.streaming import BASELINE, SPECULATIVE
from demo.models.presets import load_presets
from demo.records.scoreboard import RaceRecord, Scoreboard
from demo.web.files import MAX_UPLOAD_BYTES
from demo.web.scoreboard_tab import KEEP_EXPORTS
from tests.booth_helpers import running, scratch_cache
from tests.conftest import SMOLLM2
from tests.fakes import FakeRunner
from tests.test_bad_inputs import Raw, assert_one_clear_sentence, bench_args, call_raw, race_args

SECRET = "my own secret question about my neighbour"
BIG = "1" + "0" * 400       # 10**400: math.isfinite() raises OverflowError on it


@pytest.fixture(scope="module")
def page(session_store, smollm2_ir, tmp_path_factory):
    gradio_dir = tmp_path_factory.mktemp("gradio")
    before, temp_before = os.environ.get("GRADIO_TEMP_DIR"), tempfile.tempdir
    os.environ["GRADIO_TEMP_DIR"] = str(gradio_dir)  # uploads, and the files the page hands out
    tempfile.tempdir = str(tmp_path_factory.mktemp("tmp"))  # and anything else it writes to "/tmp"
    try:
        cache = scratch_cache(session_store, tmp_path_factory.mktemp("files") / "cache")
        with running(cache, warm=False, keep_prompts=True) as demo:
            demo.gradio_dir = gradio_dir
            demo.temp_dir = Path(tempfile.tempdir)
            demo.cache = cache
            yield demo
    finally:
        tempfile.tempdir = temp_before
        if before is None:
            os.environ.pop("GRADIO_TEMP_DIR", None)
        else:
            os.environ["GRADIO_TEMP_DIR"] = before


def post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def fn_index(demo, name: str, output_id: str | None = None) -> int:
    """The index the browser sends for an event handler (private events have no API name)."""
    for i, f in demo.fns.items():
        if getattr(f.fn, "__name__", None) == name and (
                output_id is None or any(getattr(o, "elem_id", None) == output_id for o in f.outputs)):
            return i
    raise AssertionError(f"no event handler {name!r}")


def call_private(demo, name: str, data: list, output_id: str | None = None,
                 session: str | None = None) -> tuple[int, dict]:
    """Call an event the way a browser does (`fn_index`), as any stranger can (a new session
    each call unless `session` names one): a light event through `run/predict`, a queued one
    through the queue (the page refuses the REST shortcut past it: demo.web.site)."""
    index = fn_index(demo, name, output_id)
    session = session or uuid.uuid4().hex
    body = json.dumps({"data": data, "fn_index": index, "session_hash": session}).encode()
    if not demo.fns[index].queue:
        code, raw = post(demo.local_url + "gradio_api/run/predict", body)
        return code, json.loads(raw)
    code, raw = post(demo.local_url + "gradio_api/queue/join", body)
    if code != 200:
        return code, json.loads(raw)
    with urllib.request.urlopen(f"{demo.local_url}gradio_api/queue/data?session_hash={session}", timeout=60) as r:
        for line in r:
            message = json.loads(line[5:]) if line.startswith(b"data:") else {}
            if message.get("msg") == "process_completed":
                return (200 if message.get("success") else 500), message.get("output") or {}
    raise AssertionError(f"the queue's stream ended without {name}'s answer")


def upload(demo, size: int) -> tuple[int, bytes]:
    boundary = uuid.uuid4().hex
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="r.json"\r\n'
            f"Content-Type: application/json\r\n\r\n").encode() + b"x" * size + f"\r\n--{boundary}--\r\n".encode()
    return post(demo.local_url + "gradio_api/upload", body, f"multipart/form-data; boundary={boundary}")


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


# -- uploads --------------------------------------------------------------------------------

def test_an_upload_over_the_cap_is_refused_and_not_kept(page):
    # Refused on its declared length, before the body is read (demo.web.limits): only the headers go.
    import http.client
    from urllib.parse import urlparse

    url = urlparse(page.local_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.putrequest("POST", "/gradio_api/upload")
        conn.putheader("Content-Type", "multipart/form-data; boundary=x")
        conn.putheader("Content-Length", str(MAX_UPLOAD_BYTES + 500_000))
        conn.endheaders()
        response = conn.getresponse()
        code, body = response.status, response.read()
    finally:
        conn.close()
    assert code == 413, (code, body[:200])
    assert b"larger than the" in body and b"KB this page accepts" in body
    assert all(p.stat().st_size <= MAX_UPLOAD_BYTES for p in files_under(page.gradio_dir))
    code, body = upload(page, 20_000)  # a real recording's size is taken
    assert code == 200 and json.loads(body)[0].startswith(str(page.gradio_dir))


# -- exports --------------------------------------------------------------------------------

def test_export_clicks_leave_a_bounded_number_of_files_without_other_visitors_prompts(page):
    board = Scoreboard(page.cache / "scoreboard.sqlite", keep_prompts=True)
    board.record([RaceRecord(preset="p", method="draft", mode="race", prompt_class="visitor", baseline_tokens=5,
                             speculative_tokens=5, baseline_tok_s=1.0, speculative_tok_s=2.0, speedup=2.0,
                             prompt=SECRET)] * 30)
    handed, visitor = [], uuid.uuid4().hex  # one visitor clicking again and again: its own older files go
    for _ in range(3 * KEEP_EXPORTS):
        code, out = call_private(page, "export_csv", [], session=visitor)
        assert code == 200, out
        handed.append(out["data"][0]["value"]["path"])
    exports = [p for folder in (page.gradio_dir, page.temp_dir) for p in files_under(folder) if p.suffix == ".csv"]
    assert len(exports) <= KEEP_EXPORTS, f"{len(exports)} CSV files left after {len(handed)} clicks"
    assert sum(p.stat().st_size for p in exports) <= KEEP_EXPORTS * 100_000
    newest = Path(handed[-1])
    assert newest.exists() and not Path(handed[0]).exists()  # the oldest went, the newest is there
    with urllib.request.urlopen(f"{page.local_url}gradio_api/file={newest}", timeout=30) as r:
        text = r.read().decode()
    assert text.count("\n") == 31 and SECRET not in text  # every row, no visitor's prompt
    # Names nobody can guess: the folder carries a 128-bit token.
    assert re.fullmatch(r"arena-scoreboard-[0-9a-f]{32}", newest.parent.name)


def test_benchmark_results_from_the_page_are_bounded_and_name_no_path(page, monkeypatch):
    from gradio_client import Client

    from demo.web.bench_tab import KEEP_BENCH_RESULTS
    from tests import test_bench

    monkeypatch.setattr(page.arena, "runners", lambda request, status=None, cancel=None: {
        BASELINE: test_bench.FakeRunner(BASELINE), SPECULATIVE: test_bench.FakeRunner(SPECULATIVE)})
    client = Client(page.local_url, verbose=False)
    try:
        handed = [client.predict(*bench_args(), api_name="/bench")[2] for _ in range(KEEP_BENCH_RESULTS + 2)]
    finally:
        client.close()
    on_disk = [p for folder in (page.gradio_dir, page.temp_dir) for p in files_under(folder) if p.name == "bench.json"]
    assert len(on_disk) <= KEEP_BENCH_RESULTS, f"{len(on_disk)} result files after {len(handed)} runs"
    result = json.loads(Path(handed[-1]).read_text()) if Path(handed[-1]).exists() else json.loads(on_disk[-1].read_text())
    assert len(result["samples"]) == 1
    text = json.dumps(result)
    assert str(page.cache) not in text and str(Path(page.cache).resolve()) not in text and '"/' not in text


# -- numbers a JSON body can hold and a float cannot ------------------------------------------------

NUMBERS = [
    ("race K", "race", Raw(race_args(), {5: BIG}), "'assistant tokens' must be a whole number from 1 to 16"),
    ("race K negative", "race", Raw(race_args(), {5: "-" + BIG}), "'assistant tokens' must be a whole number"),
    ("race threshold", "race", Raw(race_args(use_threshold=True), {7: BIG}), "'confidence threshold' must be a number"),
    ("race max new tokens", "race", Raw(race_args(), {8: BIG}), "'max new tokens' must be a whole number from 1 to 1024"),
    ("race temperature", "race", Raw(race_args(sampling=True), {10: BIG}), "'temperature' must be a number from 0.05"),
    ("race top-p", "race", Raw(race_args(sampling=True), {11: BIG}), "'top-p' must be a number from 0.01 to 1"),
    ("race max new tokens 1e400", "race", Raw(race_args(), {8: "1e400"}), "'max new tokens' must be a whole number"),
    ("three-way K", "three_way", Raw(["Say hi.", "smollm2-self-draft", 3, 16], {2: BIG}), "'assistant tokens' must be a whole"),
    ("three-way max new tokens", "three_way", Raw(["Say hi.", "smollm2-self-draft", 3, 16], {3: BIG}), "'max new tokens' must be"),
    ("bench prompts", "bench", Raw(bench_args(), {5: BIG}), "'prompts per class' must be a whole number from 1 to 5"),
    ("bench repeats", "bench", Raw(bench_args(), {6: BIG}), "'repeats' must be a whole number from 1 to 5"),
    ("bench max new tokens", "bench", Raw(bench_args(), {7: BIG}), "'max new tokens' must be a whole number from 16"),
]


@pytest.mark.parametrize("api, args, fragment", [c[1:] for c in NUMBERS], ids=[c[0] for c in NUMBERS])
def test_a_400_digit_number_gets_the_settings_sentence(page, api, args, fragment):
    kind, data = call_raw(page.local_url, api, args.body())
    assert kind == "error", data
    assert_one_clear_sentence(data.get("error"), fragment, "reset it and try again")


def test_malformed_json_bodies_get_http_422(page):
    for body in (b"not json", b'{"data": 5}', b"{}", b'{"data": "x"}'):
        code, raw = post(page.local_url + "gradio_api/call/race", body)
        assert code == 422, (body[:40], code, raw[:200])
    # A number of over 4,300 digits is past what Python's json reads at all: refused before any handler.
    code, raw = post(page.local_url + "gradio_api/call/race", b'{"data": [' + b"1" * 5000 + b"]}")
    assert code == 400 and raw == b'{"detail":"There was an error parsing the body"}'


# -- internals never reach the page ------------------------------------------------------------------

def test_a_failing_side_shows_a_sentence_not_the_exception(page, monkeypatch, caplog):
    from gradio_client import Client

    boom = RuntimeError("/home/operator/.cache/secret-models/main/openvino_model.xml: bad magic 0xdeadbeef")
    monkeypatch.setattr(page.arena, "runners", lambda request, status=None, cancel=None: {
        BASELINE: FakeRunner(BASELINE, [1] * 3), SPECULATIVE: FakeRunner(SPECULATIVE, [], fail_with=boom)})
    client = Client(page.local_url, verbose=False)
    try:
        outputs = client.predict(*race_args(max_new_tokens=16), api_name="/race")
    finally:
        client.close()
    shown = json.dumps(outputs, ensure_ascii=False)
    assert "failed" in shown and "server log" in shown  # the visitor is told, in words
    for leak in ("RuntimeError", "secret-models", "/home/operator", "deadbeef"):
        assert leak not in shown, f"{leak!r} reached the page"
    assert "bad magic 0xdeadbeef" in caplog.text  # the operator still has the details


def test_skewed_races_do_not_move_the_default_standing_on_the_tab(page):
    board = Scoreboard(page.cache / "scoreboard.sqlite")
    default = dict(preset="smollm2-self-draft", method="draft", mode="race", prompt_class="example:smollm2-self-draft:0",
                   baseline_tokens=128, speculative_tokens=128, baseline_tok_s=10.0, assistant_tokens=4,
                   max_new_tokens=128, sampling=False)
    board.record([RaceRecord(**default, speculative_tok_s=10 + i, speedup=1.0 + i / 10) for i in range(5)])

    def tab_rows():
        code, out = call_private(page, "poll", [-1], output_id="scoreboard")  # -1: the page has drawn nothing yet
        assert code == 200, out
        return [dict(re.findall(r"data-(\w+)='([^']*)'", tr)) for tr in re.findall(r"<tr data-[^>]*>", out["data"][0])]

    def default_row(rows):
        return next(r for r in rows if r["class"] == default["prompt_class"]
                    and r["config"] == "race · K 4 · greedy · 128 tokens")

    before = default_row(tab_rows())
    assert (before["count"], before["median"]) == ("5", "1.2000")
    skew = [dict(max_new_tokens=1), dict(sampling=True), dict(assistant_tokens=16)]
    board.record([RaceRecord(**{**default, **s}, speculative_tok_s=90.0, speedup=9.0) for s in skew for _ in range(50)])
    rows = tab_rows()
    assert default_row(rows) == before
    configs = {r["config"]: r["count"] for r in rows if r["class"] == default["prompt_class"]}
    assert configs == {"race · K 4 · greedy · 128 tokens": "5", "race · K 4 · greedy · other lengths": "50",
                       "race · K 4 · sampled · 128 tokens": "50", "race · K 16 · greedy · 128 tokens": "50"}


def test_the_scoreboard_tab_names_no_path_of_this_machine(page):
    db = page.cache / "scoreboard.sqlite"
    for p in page.cache.glob("scoreboard.sqlite*"):
        p.unlink()
    db.write_bytes(b"this is not a database at all" * 100)  # the warning a damaged file gives
    code, out = call_private(page, "poll", [-1], output_id="scoreboard")  # -1: the page has drawn nothing yet
    assert code == 200, out
    html = out["data"][0]
    assert "damaged" in html and "server log" in html
    assert str(page.cache) not in html and not re.search(r"/(?:tmp|home|root|work)/", html)


def test_the_benchmark_tab_is_offered_only_with_an_explicit_bench(monkeypatch):
    # A loopback bind is no proof that nobody outside reaches the page (a tunnel, a proxy in
    # front): the tab that takes the whole machine for 40 minutes is the operator's explicit choice.
    import app

    made = []
    monkeypatch.setattr(app, "make_demo", lambda *a, **kw: made.append(kw["bench"]) or object())
    monkeypatch.setattr(app, "launch", lambda *a, **kw: None)
    monkeypatch.delenv("SPACE_ID", raising=False)
    cases = [([], False), (["--host", "127.0.0.1"], False), (["--host", "0.0.0.0"], False),
             (["--share"], False), (["--trust-forwarded-for"], False),
             (["--bench"], True), (["--host", "0.0.0.0", "--bench"], True), (["--share", "--bench"], True)]
    for argv, expected in cases:
        assert app.main(argv) == 0
        assert made[-1] is expected, argv
    monkeypatch.setenv("SPACE_ID", "someone/arena")  # a Space
    assert app.main(["--host", "127.0.0.1"]) == 0 and made[-1] is False
    assert app.main(["--bench"]) == 0 and made[-1] is True


def test_a_page_without_the_benchmark_tab_has_no_bench_endpoint(session_store, smollm2_ir, tmp_path):
    cache = scratch_cache(session_store, tmp_path / "cache")
    with running(cache, warm=False, bench=False) as demo:
        config = json.loads(urllib.request.urlopen(demo.local_url + "config", timeout=30).read())
        assert "bench" not in [d.get("api_name") for d in config["dependencies"]]
        assert not any(getattr(f.fn, "__name__", None) == "run_bench" for f in demo.fns.values())
        # Gradio's own answer to an API name it does not know: a bare 500, and nothing runs.
        code, raw = post(demo.local_url + "gradio_api/call/bench", json.dumps({"data": bench_args()}).encode())
        assert code == 500 and raw == b"Internal Server Error", (code, raw[:200])


# -- the download folders themselves ----------------------------------------------------------------

def test_downloads_keep_at_most_keep_and_expire_by_age(tmp_path, monkeypatch):
    from demo.web import files

    d = files.Downloads("t", keep=3, max_age_s=60.0, root=lambda: tmp_path, keep_each=3)
    folders = []
    for i in range(10):
        folder = d.new_folder()
        (folder / "f.txt").write_text("x" * 100)
        folders.append(folder)
    assert [f.exists() for f in folders] == [False] * 7 + [True] * 3
    assert d.on_disk() == (3, 300) and len(list(tmp_path.iterdir())) == 3
    now = time.time()
    monkeypatch.setattr(files.time, "time", lambda: now + 61)  # ten minutes on, say: all are too old
    d.expire()
    assert d.on_disk() == (0, 0) and list(tmp_path.iterdir()) == []


def test_one_visitors_downloads_never_delete_another_visitors_pending_one(tmp_path):
    from demo.core.errors import DemoError
    from demo.web import files

    now = [1000.0]
    d = files.Downloads("t", keep=4, root=lambda: tmp_path, clock=lambda: now[0])
    theirs = d.new_folder("address:93.184.216.35")
    for _ in range(50):  # a stranger writes download after download: only their own older ones go
        mine = d.new_folder("address:6.6.6.6")
    assert theirs.exists() and mine.exists() and d.on_disk() == (0, 0)
    assert len(list(tmp_path.iterdir())) == 1 + files.KEEP_EACH
    # Rotating who they are fills the kind: further writes are refused, nobody's pending file goes.
    d.new_folder("session:x")
    with pytest.raises(DemoError, match="^Too many downloads are waiting to be fetched just now"):
        d.new_folder("session:y")
    assert theirs.exists()
    now[0] += files.GRACE_S + 1  # time enough to fetch it: now the oldest may make room
    d.new_folder("session:y")
    assert not theirs.exists() and len(list(tmp_path.iterdir())) == 4


def test_without_keep_prompts_a_recording_stays_only_while_its_visitor_may_download_it():
    from demo.web.booth import (KEEP_PRIVATE_RECORDINGS, KEEP_RECORDING_FILES, PRIVATE_RECORDING_S, Booth)

    private = Booth().files.downloads
    assert (private.keep, private.max_age_s) == (KEEP_PRIVATE_RECORDINGS, PRIVATE_RECORDING_S)
    assert KEEP_PRIVATE_RECORDINGS <= 32 and PRIVATE_RECORDING_S <= 600
    kept = Booth(keep_prompts=True).files.downloads
    assert (kept.keep, kept.max_age_s) == (KEEP_RECORDING_FILES, None)


@pytest.mark.parametrize("value", [10**400, -10**400, 10**4000, float("inf"), float("nan"), True, "5", None])
def test_every_numeric_check_refuses_any_value_with_its_sentence(value):
    from demo.core.errors import DemoError
    from demo.web import checks

    for integer in (True, False):
        with pytest.raises(DemoError, match="must be a (whole )?number from 1 to 16; reset it and try again"):
            checks.number("assistant tokens", value, 1, 16, integer=integer)


def test_no_path_of_this_machine_reaches_the_line_every_visitor_reads():
    from demo.core.errors import without_paths as no_paths

    failed = ("The disk filled up while preparing the main model: it needs about 3 GB free in "
              "/home/op/.cache/speculative-arena; free space there (or set SPECDEC_CACHE_DIR to a folder on a "
              "bigger disk) and retry.")
    shown = no_paths(failed)
    assert "/home" not in shown and "speculative-arena" not in shown
    assert "free in a folder on the server; free space there" in shown
    assert no_paths("preparing: 1/2 models, 50%") == "preparing: 1/2 models, 50%"
    # A file keeps its name (what failed), never its folder: one rule for every line the page shows.
    assert no_paths("cannot map ~/models/qwen/openvino_model.bin.") == "cannot map …/openvino_model.bin."
    assert no_paths('no model in "/srv/cache/models/qwen"') == 'no model in "a folder on the server"'



def test_the_scoreboard_draws_a_bounded_number_of_configurations():
    from demo.records.scoreboard import Group, Standings
    from demo.web.scoreboard_tab import MAX_GROUPS, board_html

    # A stranger's races with every K, threshold and length make a group each.
    groups = [Group(SMOLLM2, "visitor", "draft", tuple([1.1] * (1 + i % 3)), assistant_tokens=1 + i % 16,
                    confidence_threshold=None, default_length=False) for i in range(3000)]
    groups.append(Group(SMOLLM2, "code", "draft", tuple([1.5] * 50)))
    board = board_html(Standings(total=6050, groups=groups, newest_id=6050), load_presets())
    assert board.count("<tr data-preset=") == MAX_GROUPS
    assert "data-count='50'" in board  # the most raced configuration is among those drawn
    assert f'data-hidden="{len(groups) - MAX_GROUPS}"' in board
    assert len(board) < 200_000


def test_a_crashed_childs_last_line_names_no_folder_of_this_machine(tmp_path):
    from demo.core import isolation

    with open(tmp_path / "log", "w+b") as log:
        log.write(b"loading\nRuntimeError: cannot map /home/operator/.cache/arena/models/qwen/openvino_model.bin\n")
        line = isolation.last_line(log)
    assert line == ": RuntimeError: cannot map …/openvino_model.bin" and "/home" not in line
