"""Scoreboard, race recordings and the three-way race, in Debian's headless Chromium.

Each check compares what the page shows with an independent source: the engine's own
RunResults (the engine_runs spy), the scoreboard database read back with sqlite3, and
the downloaded recording file itself.
"""

import csv
import itertools
import json
from pathlib import Path

import pytest

from demo.engine import three_way

from .booth_helpers import (
    ARTIFACTS, another_page, browser_page, db_rows, engine_text, engine_tokens, open_tab, require_browser, running,
    scratch_cache, set_slider, tok_s, toasts, wait_ready,
)
from .conftest import SMOLLM2

pytestmark = pytest.mark.browser
require_browser()

VISITOR_PROMPT = "Name three colours of the rainbow and say one thing about each."


@pytest.fixture(scope="module")
def cache(session_store, smollm2_ir, tmp_path_factory):
    return scratch_cache(session_store, tmp_path_factory.mktemp("booth") / "cache")


@pytest.fixture(scope="module")
def app_and_page(cache, engine_runs):
    with running(cache) as demo, browser_page(demo.local_url) as page:
        wait_ready(page)
        yield demo, page


@pytest.fixture
def page(app_and_page):
    return app_and_page[1]


def runs_for(engine_runs, prompt):
    return [r for r in engine_runs if r.prompt == prompt]


def race(page, prompt, max_new_tokens):
    """Run one race from the Race tab and wait until both sides are done and summarized."""
    open_tab(page, "Race")
    box = page.locator("#max-new-tokens input[type=number]")
    if not box.is_visible():
        page.locator(".label-wrap", has_text="Settings").first.click()
    set_slider(page, "max-new-tokens", max_new_tokens)
    page.fill("#prompt textarea", prompt)
    # The verdict this race replaces (Gradio's progress overlay inside #summary is not part of it).
    page.evaluate("() => { window.__summaryBefore = document.querySelector('#summary .summary')?.outerHTML; }")
    page.click("#run")
    page.wait_for_function("""() => {
        const done = (id) => document.querySelector(`#${id}-stats .stats[data-state=done]`);
        const summary = document.querySelector('#summary .summary');
        return done('baseline') && done('speculative') && summary && summary.outerHTML !== window.__summaryBefore
            && summary.innerText.includes('speedup');
    }""", timeout=180_000)


# Every state the replay panels render: a MutationObserver sees each DOM update (a 20 ms timer
# alone missed most of a short replay while two test workers loaded the CPU), the timer adds
# the states between updates.
TOKEN_SAMPLER = """() => {
  window.__samples = [];
  const n = (slot) => +(document.querySelector(`#replay-${slot}-stats .stats`)?.dataset.tokens ?? 0);
  const sample = () => window.__samples.push({t: performance.now(), lane1: n('lane1'), lane2: n('lane2')});
  window.__observer = new MutationObserver(sample);
  window.__observer.observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
  window.__sampler = setInterval(sample, 20);
}"""


def board(page) -> dict:
    """The Scoreboard tab as shown: the total and each group row's data attributes."""
    return page.evaluate("""() => ({
        total: +(document.querySelector('#scoreboard .scoreboard-total')?.dataset.total ?? -1),
        rows: [...document.querySelectorAll('#scoreboard tr[data-class]')].map(r => ({...r.dataset})),
        dots: document.querySelectorAll('#scoreboard svg.scoreboard-plot circle').length,
    })""")


def wait_board_total(page, total, timeout_ms=30_000):
    page.wait_for_function(
        f"() => +(document.querySelector('#scoreboard .scoreboard-total')?.dataset.total ?? -1) === {total}",
        timeout=timeout_ms)


# -- the scoreboard ---------------------------------------------------------------------------

def test_scoreboard_shows_a_new_row_after_a_race_and_after_a_restart(app_and_page, cache, engine_runs,
                                                                     session_store):
    demo, page = app_and_page
    db = Path(cache) / "scoreboard.sqlite"
    before = db_rows(db) if db.exists() else []
    example = demo.arena.presets.get(SMOLLM2).examples[0]

    race(page, example, 32)
    rows = db_rows(db)
    assert len(rows) == len(before) + 1, "a finished race adds exactly one row"
    row = rows[-1]
    base = next(r for r in reversed(runs_for(engine_runs, example)) if r.side == "baseline")
    spec = next(r for r in reversed(runs_for(engine_runs, example)) if r.side == "speculative")
    assert row["prompt_class"] == f"example:{SMOLLM2}:0" and row["preset"] == SMOLLM2
    assert (row["method"], row["mode"], row["max_new_tokens"]) == ("draft", "race", 32)
    assert row["baseline_tokens"] == len(engine_tokens(base)) and row["speculative_tokens"] == len(engine_tokens(spec))
    assert row["speedup"] == pytest.approx(tok_s(spec.result) / tok_s(base.result), rel=1e-6)
    assert row["acceptance"] == pytest.approx(spec.result.ov_accepted_tokens / spec.result.ov_draft_tokens)
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    assert row["cpu_model"] == cpu and row["cores"] >= 1 and row["main_format"] == "gguf"

    open_tab(page, "Scoreboard")
    wait_board_total(page, len(rows))
    shown = board(page)
    # One table row per configuration (issue 21): this example's rows together count every race of it.
    example_rows = [r for r in shown["rows"] if r["class"] == f"example:{SMOLLM2}:0"]
    in_db = [r for r in rows if r["prompt_class"] == f"example:{SMOLLM2}:0" and r["speedup"] is not None]
    assert sum(int(r["count"]) for r in example_rows) == len(in_db)
    assert any(r["config"].startswith("race · K ") and r["config"].endswith(" · greedy · other lengths")
               for r in example_rows)  # 32 tokens, not the default 128
    assert shown["dots"] == sum(1 for r in rows if r["speedup"] is not None)

    # While the Scoreboard tab is open, a race another visitor runs appears by itself
    # (its poll), here a visitor's own prompt: counted as "visitor", its text not kept.
    from gradio_client import Client

    client = Client(demo.local_url, verbose=False)
    try:
        client.predict(VISITOR_PROMPT, SMOLLM2, "CPU", "CPU", "prompt lookup", 3, False, 0.4, 24, False, 0.7, 0.9,
                       False, "fair: each alone, then replayed", 0, 0, api_name="/race")
    finally:
        client.close()
    rows = db_rows(db)
    assert rows[-1]["prompt_class"] == "visitor" and rows[-1]["prompt"] is None
    assert (rows[-1]["mode"], rows[-1]["method"]) == ("fair", "prompt_lookup")
    wait_board_total(page, len(rows), timeout_ms=20_000)
    assert any(r["class"] == "visitor" and r["method"] == "prompt_lookup" and int(r["count"]) >= 1
               for r in board(page)["rows"])
    page.screenshot(path=str(ARTIFACTS / "scoreboard.png"), full_page=True)

    # CSV export: every row, as sqlite3 reads them.
    page.click("#scoreboard-export")
    link = page.locator("#scoreboard-csv a").first
    link.wait_for(timeout=30_000)
    with page.expect_download() as info:
        link.click()
    with open(info.value.path(), newline="", encoding="utf-8") as f:
        exported = list(csv.DictReader(f))
    assert [int(r["id"]) for r in exported] == [r["id"] for r in rows]
    assert [r["prompt_class"] for r in exported] == [r["prompt_class"] for r in rows]
    assert [float(r["speedup"]) for r in exported] == pytest.approx([r["speedup"] for r in rows])

    # A restart: a second make_demo on the same cache folder shows the same scoreboard.
    with running(cache, warm=False) as again, another_page(page, again.local_url) as fresh:
        open_tab(fresh, "Scoreboard")
        wait_board_total(fresh, len(rows))
        after = board(fresh)
        assert sorted((r["class"], r["count"]) for r in after["rows"]) == \
            sorted((r["class"], r["count"]) for r in board(page)["rows"])


# -- recordings -------------------------------------------------------------------------------

def test_a_downloaded_recording_replays_with_identical_text_and_token_counts(page, engine_runs, tmp_path):
    prompt = "Write a Python function that adds two numbers, then explain it in one sentence."
    race(page, prompt, 96)  # long enough that its replay spans several of the page's updates
    live = {side: page.evaluate(f"() => document.querySelector('#{side}-output .panel-text').textContent")
            for side in ("baseline", "speculative")}
    page.locator("#race-recording").wait_for(state="visible", timeout=30_000)
    with page.expect_download() as info:
        page.click("#race-recording")
    path = tmp_path / "race.json"
    info.value.save_as(path)
    rec = json.loads(path.read_text())

    # The file against the engine's own runs: every step's tokens, text and offset.
    assert rec["kind"] == "race" and rec["prompt"] == prompt and rec["settings"]["max_new_tokens"] == 96
    for lane in rec["lanes"]:
        run = next(r for r in reversed(runs_for(engine_runs, prompt)) if r.side == lane["name"])
        steps = lane["steps"]
        assert [t for s in steps for t in s["token_ids"]] == engine_tokens(run)
        assert "".join(s["text"] for s in steps) == engine_text(run) == live[lane["name"]]
        assert lane["tokens"] == len(engine_tokens(run))
        assert [s["t"] for s in steps] == pytest.approx([c.t - run.result.start for c in run.result.chunks], abs=1e-5)
        if lane["name"] == "speculative":
            assert [s["accepted_text"] for s in steps] == [c.accepted_text for c in run.result.chunks]

    # Replayed from an upload: the same text, tokens and steps, labelled as recorded.
    open_tab(page, "Recorded races")
    page.evaluate(TOKEN_SAMPLER)
    page.set_input_files("#replay-upload input[type=file]", str(path))
    page.wait_for_function("() => document.querySelector('#replay-summary')?.innerText.includes('speedup')",
                           timeout=60_000)
    # The sampler runs every 20 ms: let it see both final counters before it stops.
    t1, t2 = rec["lanes"][0]["tokens"], rec["lanes"][1]["tokens"]
    page.wait_for_function(f"() => window.__samples.some(x => x.lane1 == {t1}) && "
                           f"window.__samples.some(x => x.lane2 == {t2})", timeout=10_000)
    # Streamed, not dumped: the panels' token counters rise through the recorded steps, never
    # down, and show counts between none and all (the replay's pace itself is checked against
    # a fake clock in tests/test_race_logic.py, not against this machine's speed here).
    samples = page.evaluate("() => { clearInterval(window.__sampler); window.__observer.disconnect(); "
                            "return window.__samples; }")
    for slot, lane in (("lane1", rec["lanes"][0]), ("lane2", rec["lanes"][1])):
        end = next(i for i, x in enumerate(samples) if x[slot] == lane["tokens"])
        start = max(i for i, x in enumerate(samples[:end]) if x[slot] == 0) + 1  # after this replay's reset
        shown = [x[slot] for x in samples[start:end + 1]]
        assert shown == sorted(shown), f"{slot}: the counter went down: {shown}"
        cumulative = set(itertools.accumulate(len(s["token_ids"]) for s in lane["steps"]))
        between = {n for n in shown if 0 < n < lane["tokens"]}
        assert between <= cumulative and len(between) >= min(2, len(cumulative) - 1), (slot, shown)
    for slot, lane in (("lane1", rec["lanes"][0]), ("lane2", rec["lanes"][1])):
        shown = page.evaluate(f"() => document.querySelector('#replay-{slot}-output .panel-text').textContent")
        assert shown == "".join(s["text"] for s in lane["steps"])
        stats = page.locator(f"#replay-{slot}-stats .stats")
        assert stats.get_attribute("data-state") == "done"
        assert int(stats.get_attribute("data-tokens")) == lane["tokens"]
    spec = rec["lanes"][1]
    marks = page.evaluate("""() => [...document.querySelectorAll('#replay-lane2-output .step')].map(s => {
        const a = s.querySelector('.tok-accepted'); return a ? +a.dataset.n : 0; })""")
    assert marks == [len(s["token_ids"]) - 1 for s in spec["steps"]]
    label = page.inner_text("#replay-label")
    assert "Recorded on" in label and rec["machine"]["cpu_model"] in label and rec["recorded_at"][:10] in label
    assert not page.locator("#replay-lane3-output").is_visible(), "a two-lane recording shows two panels"
    page.screenshot(path=str(ARTIFACTS / "replay-upload.png"), full_page=True)


def _valid_recording(tmp: Path) -> dict:
    shipped = sorted((Path(__file__).resolve().parent.parent / "recordings").glob("*race*.json"))
    assert shipped, "the repo ships recordings"
    return json.loads(shipped[0].read_text())


def _bad_files(tmp: Path) -> list:
    good = _valid_recording(tmp)
    text = json.dumps(good)
    out = []
    (tmp / "truncated.json").write_text(text[: len(text) // 2])
    out.append(("truncated.json", "This recording is not valid JSON"))
    wrong = json.loads(text)
    wrong["lanes"][1]["tokens"] += 1
    (tmp / "wrong-count.json").write_text(json.dumps(wrong))
    out.append(("wrong-count.json", "This recording does not match the recording format"))
    extra = json.loads(text)
    extra["<img src=x onerror=alert(1)>"] = 1
    (tmp / "extra-field.json").write_text(json.dumps(extra))
    out.append(("extra-field.json", "This recording does not match the recording format"))
    (tmp / "not-a-recording.json").write_text(json.dumps({"hello": "world"}))
    out.append(("not-a-recording.json", "This file is not a speculative-arena recording"))
    from demo.records.recording import MAX_BYTES

    (tmp / "over-the-cap.json").write_bytes(b"[" + b"0," * (MAX_BYTES // 2) + b"0]")  # just over, under the upload cap
    out.append(("over-the-cap.json", "recordings up to 1.1 MB can be replayed"))
    # Issue 21: 3,900 quote characters in a one-token step (7.7 MB of HTML per render at 480 steps).
    long_step = json.loads(text)
    long_step["lanes"][0]["steps"][0]["text"] = '"' * 3_900
    (tmp / "long-step.json").write_text(json.dumps(long_step))
    out.append(("long-step.json", "more than tokens ever decode to"))
    return out


def upload_and_read_refusal(page, path: Path, expected: str) -> str:
    """Upload a file to the Recorded races tab; return the error toast that names `expected`."""
    page.set_input_files("#replay-upload input[type=file]", str(path))
    page.wait_for_function(
        f"() => [...document.querySelectorAll('[data-testid=toast-body]')].some(t => t.innerText.includes({json.dumps(expected)}))",
        timeout=60_000)
    text = next(t for t in toasts(page) if expected in t)
    return text.strip().split("\n")[-1].strip()  # the toast reads "Error", "×", then the message


def test_bad_recordings_get_one_sentence_and_never_break_the_page(page, tmp_path):
    open_tab(page, "Recorded races")
    # 50 MB: refused in the browser by the upload cap (Gradio's own words), never sent to the disk.
    with open(tmp_path / "huge.json", "wb") as f:
        f.write(b"[" + b"0," * (25 * 1024 * 1024) + b"0]")
    upload_and_read_refusal(page, tmp_path / "huge.json", "exceed the maximum allowed size")
    for name, expected in _bad_files(tmp_path):
        message = upload_and_read_refusal(page, tmp_path / name, expected)
        assert "Traceback" not in message, (name, message)
        assert message.endswith(".") and message.count(". ") == 0, f"{name}: not one sentence: {message!r}"
        assert "<img" not in message and "onerror" not in message, f"{name}: the file's content was echoed"
    assert page.dialogs == [], f"a recording's content ran: {page.dialogs}"
    # The page still works: a good recording (the menu's first) replays after all of that.
    from demo.records.playback import shipped

    first = next(iter(shipped().values()))
    page.click("#replay-run")
    page.wait_for_function(
        f"() => document.querySelector('#replay-label')?.innerText.includes({json.dumps(first.prompt[:30])})"
        f" && document.querySelector('#replay-lane1-stats .stats[data-state=done]')?.dataset.tokens"
        f" == '{first.lanes[0].tokens}' && document.querySelector('#replay-summary')?.innerText.includes('speedup')",
        timeout=60_000)


def test_html_in_a_recording_is_shown_as_text(page, tmp_path):
    rec = _valid_recording(tmp_path)
    evil = "<img src=x onerror=\"window.__pwned=1;alert(1)\"><script>window.__pwned=2</script>"
    for lane in rec["lanes"]:
        step = lane["steps"][1]
        step["token_ids"] += [7, 7]  # room for the markup: a step holds at most 64 characters a token
        lane["tokens"] += 2
        step["text"] = evil + step["text"]
        if lane["name"] != "baseline" and len(step["token_ids"]) > 1:
            step["accepted_text"] = evil + step["accepted_text"]
    rec["machine"]["cpu_model"] = "<b onmouseover=alert(3)>Evil CPU</b>"
    rec["prompt"] = "<script>window.__pwned=3</script>"
    path = tmp_path / "html.json"
    path.write_text(json.dumps(rec))
    open_tab(page, "Recorded races")
    page.set_input_files("#replay-upload input[type=file]", str(path))
    done = " && ".join(f"document.querySelector('#replay-{slot}-stats .stats[data-state=done]')?.dataset.tokens"
                       f" == '{lane['tokens']}'" for slot, lane in zip(("lane1", "lane2"), rec["lanes"]))
    page.wait_for_function(f"() => document.querySelector('#replay-label')?.innerText.includes('Evil CPU') && {done}"
                           " && document.querySelector('#replay-summary')?.innerText.includes('speedup')",
                           timeout=60_000)
    for slot, lane in zip(("lane1", "lane2"), rec["lanes"]):
        shown = page.evaluate(f"() => document.querySelector('#replay-{slot}-output .panel-text').textContent")
        assert shown == "".join(s["text"] for s in lane["steps"]) and evil in shown
        tags = page.evaluate(f"""() => [...document.querySelectorAll('#replay-{slot}-output .panel-text *')]
                                      .map(e => e.tagName.toLowerCase())""")
        assert set(tags) <= {"span"}, tags
    assert "<b onmouseover=alert(3)>Evil CPU</b>" in page.inner_text("#replay-label")
    assert "<script>window.__pwned=3</script>" in page.inner_text("#replay-label")
    assert page.locator("#replay-label b[onmouseover], #replay-label script").count() == 0
    assert page.dialogs == [] and page.evaluate("() => window.__pwned === undefined")


def test_stop_ends_a_replay_that_waits_minutes_for_its_next_step(page, tmp_path):
    # Issue 21: a two-step recording, t = 0 and t = 899 s; Stop used to wait out the 899 s sleep.
    rec = _valid_recording(tmp_path)
    for lane in rec["lanes"]:
        lane["steps"] = [lane["steps"][0], {**lane["steps"][1], "t": 899.0}]
        lane["tokens"] = sum(len(s["token_ids"]) for s in lane["steps"])
        lane["seconds"] = 899.0
    path = tmp_path / "two-steps-899-s-apart.json"
    path.write_text(json.dumps(rec))
    open_tab(page, "Recorded races")
    page.set_input_files("#replay-upload input[type=file]", str(path))
    first = len(rec["lanes"][0]["steps"][0]["token_ids"])
    page.wait_for_function(f"() => document.querySelector('#replay-lane1-stats .stats[data-state=running]')"
                           f"?.dataset.tokens == '{first}'", timeout=60_000)
    # Gradio answers /cancel once the handler has stopped, which it can only do between two of
    # its updates: before the fix, after the 899 s sleep.
    with page.expect_response(lambda r: r.url.endswith("/cancel"), timeout=30_000):
        page.click("#replay-stop")
    # The replay slot is free again: a shipped recording replays to its end.
    page.click("#replay-run")
    page.wait_for_function("() => document.querySelector('#replay-lane1-stats .stats[data-state=done]')"
                           " && document.querySelector('#replay-summary')?.innerText.includes('speedup')",
                           timeout=60_000)


def test_shipped_three_way_recording_replays_in_three_panels(page):
    open_tab(page, "Recorded races")
    page.locator("#replay-choice input").click()
    page.locator("ul[role=listbox] li", has_text="three-way").first.click()
    page.click("#replay-run")
    page.wait_for_function("() => document.querySelector('#replay-summary .three-way')?.dataset.winner",
                           timeout=60_000)
    for slot in ("lane1", "lane2", "lane3"):
        assert page.locator(f"#replay-{slot}-stats .stats").get_attribute("data-state") == "done"
    assert "Recorded on" in page.inner_text("#replay-label")


# -- the three-way race -----------------------------------------------------------------------

def test_three_way_race_shows_three_panels_and_a_winner(page, engine_runs):
    prompt = three_way.EXAMPLE_PROMPTS[0]
    open_tab(page, "Three-way race")
    set_slider(page, "three-way-max-new-tokens", 48)
    page.locator("#three-way-examples button").first.click()
    page.wait_for_function(f"() => document.querySelector('#three-way-prompt textarea').value === {json.dumps(prompt)}")
    before = len(runs_for(engine_runs, prompt))
    page.click("#three-way-run")
    page.wait_for_function("() => document.querySelector('#three-way-summary .three-way')?.dataset.winner",
                           timeout=240_000)
    runs = runs_for(engine_runs, prompt)[before:]
    assert [(r.side, r.settings.method) for r in runs] == [
        ("baseline", "draft"), ("speculative", "draft"), ("speculative", "prompt_lookup")]
    by_lane = dict(zip(three_way.LANES, runs))
    # One after the other, each alone: no two lanes ran at the same time.
    for a, b in zip(runs, runs[1:]):
        assert a.result.end <= b.result.start
    for lane, run in by_lane.items():
        stats = page.locator(f"#three-way-{lane}-stats .stats")
        assert stats.get_attribute("data-state") == "done"
        assert int(stats.get_attribute("data-tokens")) == len(engine_tokens(run)) > 0
        shown = page.evaluate(f"() => document.querySelector('#three-way-{lane}-output .panel-text').textContent")
        assert shown == engine_text(run)
    speeds = {lane: tok_s(run.result) for lane, run in by_lane.items()}
    winner = max(speeds, key=speeds.get)
    summary = page.locator("#three-way-summary .three-way")
    assert summary.get_attribute("data-winner") == winner
    second = sorted(speeds.values())[-2]
    assert float(summary.get_attribute("data-margin")) == pytest.approx(speeds[winner] / second, abs=1e-4)
    assert three_way.TITLES[winner] in page.inner_text("#three-way-summary")
    page.screenshot(path=str(ARTIFACTS / "three-way.png"), full_page=True)
    # Its recording has the three lanes, as run.
    page.locator("#three-way-recording").wait_for(state="visible", timeout=30_000)
    with page.expect_download() as info:
        page.click("#three-way-recording")
    rec = json.loads(Path(info.value.path()).read_text())
    assert [lane["name"] for lane in rec["lanes"]] == list(three_way.LANES)
    assert [lane["tokens"] for lane in rec["lanes"]] == [len(engine_tokens(by_lane[l])) for l in three_way.LANES]


@pytest.mark.parametrize("args, fragment", [
    ((None, SMOLLM2, 3, 32), "The prompt is empty"),
    (("hi", "no-such-preset", 3, 32), "The setting 'model pair' must be one of: "),
    (("hi", SMOLLM2, None, 32), "'assistant tokens' must be a whole number from 1 to 16"),
    (("hi", SMOLLM2, 2.5, 32), "'assistant tokens' must be a whole number from 1 to 16"),
    (("hi", SMOLLM2, 3, 100_000), "'max new tokens' must be a whole number from 1 to 512"),
    (("hi", SMOLLM2, "3", 32), "'assistant tokens' must be a whole number"),
    (("x" * 17_000, SMOLLM2, 3, 32), "characters long"),
])
def test_three_way_api_refuses_bad_values_in_one_sentence(app_and_page, args, fragment):
    """/three_way is public like /race: a stranger's values are checked on the server."""
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    demo, _ = app_and_page
    before = demo.arena.admission.state()
    client = Client(demo.local_url, verbose=False)
    try:
        with pytest.raises(AppError) as info:
            client.predict(*args, api_name="/three_way")
    finally:
        client.close()
    text = str(info.value)
    assert fragment in text and "Traceback" not in text and "\n" not in text.strip()
    assert demo.arena.admission.state() == before == {"running": None, "waiting": 0}
