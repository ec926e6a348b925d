"""Recordings (demo.records.recording), the three-way engine (demo.engine.three_way, race.one_by_one) and
what a finished race leaves behind (demo.records.outcomes), on fake runners: fast and exact."""

import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from demo.core.errors import DemoError
from demo.core.settings import GenerationSettings
from demo.core.streaming import BASELINE, SPECULATIVE, Chunk, ChunkEvent, DoneEvent, RunResult, StatusEvent
from demo.engine import three_way
from demo.engine.arena import Arena, RaceRequest
from demo.engine.race import one_by_one, race
from demo.records import playback, recording
from demo.records.recording import RecordingError

from .fakes import FakeRunner, ProvenGuard

MACHINE = {"cpu_model": "Test CPU", "isa_flags": ["avx2"], "cores": 2, "cpu_count": 2, "memory_gb": 16.0,
           "platform": "Linux"}
SETTINGS = GenerationSettings(max_new_tokens=64, assistant_tokens=3)


def finished_race(prompt="Say hi") -> dict:
    runners = {BASELINE: FakeRunner(BASELINE, [1] * 12, delay_s=0.002),
               SPECULATIVE: FakeRunner(SPECULATIVE, [3, 1, 4, 2, 2], delay_s=0.004)}
    return {e.side: e.result for e in race(runners, prompt, SETTINGS) if isinstance(e, DoneEvent)}


def make(results=None, kind="race", **kw) -> recording.Recording:
    results = results or finished_race()
    args = dict(kind=kind, mode="race" if kind == "race" else "three-way", preset="p", settings=SETTINGS,
                prompt="Say hi", prompt_class="visitor", how="both at once", machine=MACHINE,
                versions={"python": "3.11", "openvino": "x"}, main_format="gguf", draft_format="gguf")
    args.update(kw)
    return recording.from_results(results, **args)


# -- round trip -------------------------------------------------------------------------------

def test_a_recording_round_trips_every_step(tmp_path):
    results = finished_race()
    rec = make(results)
    path = recording.save(rec, tmp_path / "r.json")
    back = playback.to_results(recording.load(path))
    for side, r in results.items():
        got = back[side]
        assert [c.token_ids for c in got.chunks] == [c.token_ids for c in r.chunks]
        assert [c.text for c in got.chunks] == [c.text for c in r.chunks]
        assert [c.accepted_text for c in got.chunks] == [c.accepted_text for c in r.chunks]
        assert [c.t for c in got.chunks] == pytest.approx([c.t - r.start for c in r.chunks], abs=1e-6)
        assert got.end - got.start == pytest.approx(r.end - r.start, abs=1e-6)
        assert [c.accepted for c in got.chunks] == [c.accepted for c in r.chunks]
    # The file itself, as JSON: counts as the runs had them.
    raw = json.loads(path.read_text())
    assert [lane["tokens"] for lane in raw["lanes"]] == [len(results[s].token_ids) for s in (BASELINE, SPECULATIVE)]


def test_a_recording_holds_the_acceptance_curve_and_old_ones_load_without_it(tmp_path):
    rec = recording.load(recording.save(make(), tmp_path / "r.json"))
    # The fake speculative side streams steps of 3 (the prompt's), 1, 4, 2, 2 tokens with K=3:
    # guess 1 reached 4 times, kept 3; guess 2 reached in the steps of 4 and 2 (the last step,
    # kept 1 guess, is censored), kept once; guess 3 reached and kept once.
    curve = rec.lane("speculative").acceptance
    assert (curve.k, curve.reached, curve.kept) == (3, [4, 2, 1], [3, 1, 1])
    assert curve.rate == pytest.approx([0.75, 0.5, 1.0]) and rec.version == 2
    assert curve.tokens_per_step == pytest.approx(1 + 0.75 + 0.75 * 0.5 + 0.75 * 0.5 * 1.0)
    assert rec.lane("baseline").acceptance is None
    old = recording.load(Path(__file__).resolve().parents[1] / "recordings" / "smollm2-race-reverse-string.json")
    assert old.version == 1 and all(lane.acceptance is None for lane in old.lanes)
    # A threshold run has no fixed K, so no curve.
    free = make(settings=GenerationSettings(max_new_tokens=64, assistant_tokens=None, confidence_threshold=0.4))
    assert free.lane("speculative").acceptance is None


def test_replay_summary_comes_from_the_recorded_numbers():
    results = finished_race()
    summary = playback.summarize(make(results))
    b, s = results[BASELINE], results[SPECULATIVE]
    expected = (len(s.token_ids) / (s.end - s.start)) / (len(b.token_ids) / (b.end - b.start))
    assert summary.speedup == pytest.approx(expected, rel=1e-4)
    assert "recorded on Test CPU (2 cores, avx2)" in summary.how


def test_a_shipped_recording_is_valid_and_consistent():
    shipped = playback.shipped()
    assert len(shipped) >= 3 and {r.kind for r in shipped.values()} == {"race", "three-way"}
    for rec in shipped.values():
        assert rec.lanes[0].name == "baseline"
        assert all(lane.tokens == sum(len(s.token_ids) for s in lane.steps) > 0 for lane in rec.lanes)


# -- untrusted files ----------------------------------------------------------------------------

def good_json() -> dict:
    return json.loads(recording.dumps(make()))


def mutate(f):
    data = good_json()
    f(data)
    return json.dumps(data).encode()


BAD = [
    ("truncated", lambda: recording.dumps(make())[:300], "not valid JSON"),
    ("not UTF-8", lambda: b"\xff\xfe{}", "not UTF-8 text"),
    ("NaN", lambda: recording.dumps(make()).replace(b'"seconds":', b'"seconds":NaN,"x":', 1), "NaN or Infinity"),
    ("a 5,000-digit integer", lambda: recording.dumps(make()).replace(b'"seconds":', b'"seconds":' + b"9" * 5000
                                                                      + b',"x":', 1), "a number far too long"),
    ("nested", lambda: b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    ("not a recording", lambda: b'{"hello": "world"}', "not a speculative-arena recording"),
    ("a list", lambda: b"[1, 2, 3]", "not a speculative-arena recording"),
    ("newer", lambda: mutate(lambda d: d.update(version=7)), "newer version of the demo"),
    ("extra key", lambda: mutate(lambda d: d.update({"<script>alert(1)</script>": 1})), "a field that recordings do not have"),
    ("token count", lambda: mutate(lambda d: d["lanes"][1].update(tokens=d["lanes"][1]["tokens"] + 1)), "steps hold"),
    ("time goes back", lambda: mutate(lambda d: d["lanes"][0]["steps"].reverse()), "never go back"),
    ("accepted not a prefix", lambda: mutate(lambda d: d["lanes"][1]["steps"][0].update(accepted_text="zzz")),
     "accepted text must be the start"),
    ("baseline accepted", lambda: mutate(lambda d: d["lanes"][0]["steps"][0].update(
        accepted_text=d["lanes"][0]["steps"][0]["text"])), "baseline has no draft"),
    ("lanes swapped", lambda: mutate(lambda d: d["lanes"].reverse()), "lanes baseline, speculative"),
    ("three lanes in a race", lambda: mutate(lambda d: d["lanes"].append(d["lanes"][1])), "in that order"),
    ("negative token", lambda: mutate(lambda d: d["lanes"][0]["steps"][0].update(token_ids=[-1])), "greater than or equal"),
    ("too long", lambda: mutate(lambda d: d["lanes"][0].update(seconds=10_000)), "less than or equal"),
    ("bad date", lambda: mutate(lambda d: d.update(recorded_at="yesterday")), "ISO 8601"),
    ("over the cap", lambda: b" " * (recording.MAX_BYTES + 1), f"recordings up to {recording._mb(recording.MAX_BYTES)}"),
    # Issue 21: 3,900 quote characters in a one-token step (7.7 MB of HTML per render, at 480 steps).
    ("huge step text", lambda: mutate(lambda d: d["lanes"][0]["steps"][0].update(text='"' * 3_900)),
     "a step holds 3,900 characters of text for 1 token, more than tokens ever decode to (at most 64 each)"),
    ("a lane of long steps", lambda: mutate(lambda d: d["lanes"][0].update(
        tokens=600, seconds=60.0, steps=[{"t": i / 10, "token_ids": [1], "text": "x" * 64} for i in range(600)])),
     "the lane holds 38,400 characters of text, more than a race of 2,048 tokens ever makes (32,768)"),
    ("padded to a megabyte", lambda: recording.dumps(make()) + b" " * (1024 * 1024),
     "more than a recording of that length takes"),
    ("curve not the steps'", lambda: mutate(lambda d: d["lanes"][1]["acceptance"].update(kept=[4, 1, 1])),
     "acceptance curve must be the one its steps give"),
    ("curve of another K", lambda: mutate(lambda d: d["lanes"][1]["acceptance"].update(
        k=2, reached=[4, 2], kept=[3, 1], rate=[0.75, 0.5], tokens_per_step=2.125)),
     "as many positions as the settings"),
    ("curve on the baseline", lambda: mutate(lambda d: d["lanes"][0].update(acceptance=d["lanes"][1]["acceptance"])),
     "acceptance curve must be the one"),
]


@pytest.mark.parametrize("name, data, fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_recordings_are_refused_in_one_sentence(name, data, fragment):
    with pytest.raises(RecordingError) as info:
        recording.load_bytes(data())
    msg = str(info.value)
    assert fragment in msg, msg
    assert "\n" not in msg and msg.endswith(".") and ". " not in msg, f"not one sentence: {msg!r}"
    assert "<script>" not in msg, "the file's text was echoed"


def test_a_huge_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(50 * 1024 * 1024)  # 50 MB, sparse
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    with pytest.raises(RecordingError, match="This file is 50.0 MB"):
        recording.load(path)
    assert opened == [], "the file was opened although its size alone refuses it"


# -- race.one_by_one: the three lanes, each alone --------------------------------------------------

def lanes_of(runners: dict, loaded: list):
    def getter(name):
        def get(status):
            status(f"loading {name}")
            loaded.append(name)
            r = runners[name]
            if isinstance(r, Exception):
                raise r
            return r
        return get
    return [(name, getter(name), replace(SETTINGS, method="prompt_lookup" if name == "lookup" else "draft"))
            for name in runners]


def test_lanes_run_one_after_the_other_with_their_own_names():
    runners = {"baseline": FakeRunner(BASELINE, [1] * 5), "draft": FakeRunner(SPECULATIVE, [2, 2]),
               "lookup": FakeRunner(SPECULATIVE, [3, 1])}
    finished, loaded = [], []
    events = list(one_by_one(lanes_of(runners, loaded), "p", on_finished=lambda: finished.append(time.perf_counter()),
                             on_status=lambda m: StatusEvent(m)))
    done = {e.side: e.result for e in events if isinstance(e, DoneEvent)}
    assert list(done) == ["baseline", "draft", "lookup"] == loaded
    assert done["baseline"].end <= done["draft"].start and done["draft"].end <= done["lookup"].start
    # Each lane is loaded only after the lane before it has finished.
    order = [("status", e.message) if isinstance(e, StatusEvent) else (type(e).__name__, e.side) for e in events]
    assert order.index(("status", "loading draft")) > order.index(("DoneEvent", "baseline"))
    chunks = [e for e in events if isinstance(e, ChunkEvent) and e.side == "lookup"]
    assert [c.chunk.side for c in chunks] == [SPECULATIVE] * 2 and chunks[0].chunk.accepted == 2
    assert len(finished) == 1


def test_a_lane_that_cannot_load_fails_alone():
    runners = {"baseline": FakeRunner(BASELINE, [1] * 3), "draft": DemoError("out of memory"),
               "lookup": FakeRunner(SPECULATIVE, [2])}
    done = {e.side: e.result for e in one_by_one(lanes_of(runners, []), "p") if isinstance(e, DoneEvent)}
    assert done["draft"].error == "out of memory" and not done["lookup"].error and done["lookup"].chunks


def _consume(events, into: list) -> threading.Thread:
    """Iterate `events` in a thread of its own: a stream that never ends is seen as a join that times out."""
    worker = threading.Thread(target=lambda: into.extend(events), daemon=True)
    worker.start()
    return worker


@pytest.mark.parametrize("error, words", [(MemoryError(), "not enough memory to load the draft lane"),
                                          (OSError(28, "No space left on device"), "an unexpected error stopped it")])
def test_a_lane_loader_that_raises_anything_ends_with_a_sentence_and_frees_the_slot(error, words):
    """Not only DemoError: a MemoryError (std::bad_alloc) or an OSError from a loader used to kill the
    lanes' thread before it ended the stream, so the visitor's stream, and its claim, waited forever."""
    runners = {"baseline": FakeRunner(BASELINE, [1] * 3), "draft": error, "lookup": FakeRunner(SPECULATIVE, [2])}
    finished, events = threading.Event(), []
    consumer = _consume(one_by_one(lanes_of(runners, []), "p", on_finished=finished.set), events)
    consumer.join(30)  # a hang guard: the stream ends as soon as the last lane has
    assert not consumer.is_alive(), "the stream never ended"
    done = {e.side: e.result for e in events if isinstance(e, DoneEvent)}
    assert words in done["draft"].error and "Error" not in done["draft"].error
    assert not done["lookup"].error and done["lookup"].chunks
    assert finished.is_set()


def test_stopping_ends_the_lane_in_flight_and_skips_the_rest():
    stop = threading.Event()
    runners = {"baseline": FakeRunner(BASELINE, [1] * 200, delay_s=0.01, watch=stop),
               "draft": FakeRunner(SPECULATIVE, [2]), "lookup": FakeRunner(SPECULATIVE, [2])}
    finished = threading.Event()
    events = one_by_one(lanes_of(runners, []), "p", stop, on_finished=finished.set)
    for e in events:
        if isinstance(e, ChunkEvent) and e.chunk.token_ids[0] >= 5:
            break
    events.close()  # the visitor pressed Stop: closing never waits for the worker
    assert stop.is_set()
    assert finished.wait(5)
    assert runners["baseline"].after_stop <= 1 and runners["draft"].calls == runners["lookup"].calls == 0


# -- the three-way run through the Arena ---------------------------------------------------------

class FakeCache:
    def __init__(self, arena):
        self.arena, self.calls = arena, []

    def get(self, main, draft, method, options, status=lambda m: None):
        self.calls.append((method, draft, options.threads, self.arena.admission.state()["running"]))
        return {BASELINE: FakeRunner(BASELINE, [1] * 4), SPECULATIVE: FakeRunner(SPECULATIVE, [2, 2])}

    @staticmethod
    def key(main, draft, method, options):
        return (main, draft, method, options)

    def get_side(self, key, side, status=lambda m: None):
        main, draft, method, options = key
        return self.get(main, draft, method, options, status)[side]


def fake_arena(presets, with_draft=True, guard=None):
    arena = Arena(presets, store=SimpleNamespace(cache_dir=Path("/nonexistent")), guard=guard or ProvenGuard())
    arena.cache = FakeCache(arena)
    preset = presets.get("smollm2-self-draft")
    pair = SimpleNamespace(preset=preset, main=Path("/m"), draft=Path("/d") if with_draft else None,
                           main_format="gguf", draft_format="gguf", baseline=None)
    arena.prepare = lambda *a, **k: pair
    arena.prepared = lambda request: pair
    return arena


def test_three_way_runs_three_lanes_in_one_admission_slot(presets):
    arena = fake_arena(presets)
    request = RaceRequest(prompt="hello", preset="smollm2-self-draft", settings=SETTINGS)
    events = list(three_way.run(arena, request))
    done = {e.side: e.result for e in events if isinstance(e, DoneEvent)}
    assert list(done) == list(three_way.LANES)
    methods = [(m, d is not None, threads, holder) for m, d, threads, holder in arena.cache.calls]
    # Loaded inside the slot, each lane with every core (threads None), the draft pair first.
    assert methods[0] == ("draft", True, None, "a three-way race")
    assert ("prompt_lookup", False, None, "a three-way race") in methods
    assert arena.admission.state() == {"running": None, "waiting": 0}
    summary = three_way.summarize(done, "how")
    assert summary.winner in three_way.LANES and set(summary.speedups) == {"draft", "lookup"}


def test_a_heads_preset_races_its_eagle3_head_in_the_draft_lane(presets):
    """The draft lane of an EAGLE-3 preset runs the head as EAGLE-3 (a draft method would be
    refused for a head folder): both drafting lanes load with method eagle3, lookup stays."""
    arena = fake_arena(presets)
    request = RaceRequest(prompt="hello", preset="qwen3-1.7b-eagle3", settings=SETTINGS)
    list(three_way.run(arena, request))
    methods = {(m, d is not None) for m, d, threads, holder in arena.cache.calls}
    assert methods == {("eagle3", True), ("prompt_lookup", False)}


def test_three_way_refuses_what_it_cannot_race(presets):
    arena = fake_arena(presets)
    threshold = GenerationSettings(assistant_tokens=None, confidence_threshold=0.4)
    with pytest.raises(DemoError, match="needs a number of assistant tokens"):
        list(three_way.run(arena, RaceRequest(prompt="hi", preset="smollm2-self-draft", settings=threshold)))
    with pytest.raises(DemoError, match="The prompt is empty"):
        list(three_way.run(arena, RaceRequest(prompt=" ", preset="smollm2-self-draft", settings=SETTINGS)))
    no_draft = presets.model_copy(update={"presets": {**presets.presets, "solo": presets.get(
        "smollm2-self-draft").model_copy(update={"name": "solo", "draft": None})}})
    with pytest.raises(DemoError, match="has no draft model"):
        list(three_way.run(fake_arena(no_draft), RaceRequest(prompt="hi", preset="solo", settings=SETTINGS)))


def result(side, tokens, seconds, error=None):
    chunks = [Chunk(side, (i,), "x", "", 0.01 * (i + 1)) for i in range(tokens)]
    return RunResult(side, start=0.0, end=seconds, chunks=chunks, error=error)


@pytest.mark.parametrize("speeds, winner, sentence", [
    ((10, 5, 20), "lookup", "Prompt lookup won: 2.00× the baseline's speed, 4.00× the draft model's."),
    ((10, 15, 5), "draft", "Draft model won: 1.50× the baseline's speed, 3.00× the prompt lookup's."),
    ((10, 15, 12), "draft", "Draft model won: 1.50× the baseline's speed, 1.25× the prompt lookup's."),
    ((10, 5, 8), "baseline", "The baseline won: speculation did not pay off on this prompt "
                             "(draft model 0.50×, prompt lookup 0.80× the baseline's speed)."),
])
def test_three_way_winner_and_margin(speeds, winner, sentence):
    # tok/s = tokens / seconds with 40 tokens each: seconds = 40 / speed.
    results = {"baseline": result(BASELINE, 40, 40 / speeds[0]), "draft": result(SPECULATIVE, 40, 40 / speeds[1]),
               "lookup": result(SPECULATIVE, 40, 40 / speeds[2])}
    s = three_way.summarize(results)
    assert s.winner == winner and s.sentence == sentence
    ranked = sorted(speeds, reverse=True)
    assert s.margin == pytest.approx(ranked[0] / ranked[1])


def test_a_failed_lane_cannot_win():
    results = {"baseline": result(BASELINE, 40, 4.0), "draft": result(SPECULATIVE, 40, 1.0, error="boom"),
               "lookup": result(SPECULATIVE, 40, 2.0)}
    s = three_way.summarize(results)
    assert s.winner == "lookup" and s.errors == {"draft": "boom"} and s.speedups["draft"] is None


# -- what a finished race leaves behind ----------------------------------------------------------

def test_outcome_records_finished_races_only(presets, tmp_path):
    from demo.records import outcomes
    from demo.records.scoreboard import Scoreboard

    arena = fake_arena(presets)
    board = Scoreboard(tmp_path / "s.sqlite")
    request = RaceRequest(prompt=presets.get("smollm2-self-draft").examples[1], preset="smollm2-self-draft",
                          settings=SETTINGS)
    results = finished_race()
    out = outcomes.after_race(arena, request, results, "how", board)
    assert out.warning is None and len(out.rows) == 1
    assert out.recording.prompt_class == "example:smollm2-self-draft:1"
    stopped = dict(results)
    stopped[SPECULATIVE] = replace(results[SPECULATIVE], cancelled=True)
    assert outcomes.after_race(arena, request, stopped, "how", board) is None
    failed = dict(results)
    failed[BASELINE] = replace(results[BASELINE], error="boom")
    assert outcomes.after_race(arena, request, failed, "how", board) is None
    assert board.standings().total == 1
    assert out.recording.baseline_format is None  # one main on both sides: nothing more to say
    # A baseline on its own main (this machine's fastest alone): the recording says which, and keeps it.
    pair = arena.prepared(request)
    arena.prepared = lambda r: SimpleNamespace(**{**vars(pair), "baseline": Path("/b"), "baseline_format": "int8"})
    kept = outcomes.after_race(arena, request, results, "how", None).recording
    assert kept.baseline_format == "int8" and recording.load_bytes(recording.dumps(kept)).baseline_format == "int8"


def test_a_broken_scoreboard_warns_and_still_records_the_race(presets, tmp_path):
    from demo.records import outcomes
    from demo.records.scoreboard import Scoreboard

    path = tmp_path / "s.sqlite"
    path.write_bytes(b"garbage" * 1000)
    request = RaceRequest(prompt="hi", preset="smollm2-self-draft", settings=SETTINGS)
    out = outcomes.after_race(fake_arena(presets), request, finished_race("hi"), "how", Scoreboard(path))
    assert out.rows == [] and "is damaged" in out.warning
    assert out.recording is not None and out.recording.prompt_class == "visitor"
