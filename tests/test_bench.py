"""python -m demo.bench: one real, tiny run on SmolLM2 (one pipeline pair load), plus fake
runners for the bookkeeping that a real run cannot reach cheaply (race mode, Ctrl-C, stop)."""

import contextlib
import io
import json
import math
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from demo.bench import cli, measure, plot, report
from demo.core.bench_prompts import CLASSES, PROMPTS, select
from demo.core.errors import DemoError
from demo.core.streaming import BASELINE, SPECULATIVE, Chunk, RunResult

from .conftest import SMOLLM2
from .fakes import RecordingRunner

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SAMPLE_KEYS = {"mode", "method", "assistant_tokens", "prompt_id", "class", "repeat",
               BASELINE, SPECULATIVE, "acceptance_rate", "speedup", "verdict"}
SIDE_KEYS = {"tokens", "elapsed_s", "tokens_per_s", "ttft_s", "steps", "error"}
STAT_KEYS = {"baseline_tokens_per_s", "speculative_tokens_per_s", "baseline_ttft_s", "speculative_ttft_s",
             "acceptance_rate", "tokens_per_step", "speedup"}


def check_consistent(sample: dict) -> None:
    for side in (BASELINE, SPECULATIVE):
        s = sample[side]
        assert s["error"] is None
        assert s["tokens"] > 0 and s["elapsed_s"] > 0
        assert math.isclose(s["tokens"] / s["elapsed_s"], s["tokens_per_s"], rel_tol=1e-6)
    ratio = sample[SPECULATIVE]["tokens_per_s"] / sample[BASELINE]["tokens_per_s"]
    assert math.isclose(sample["speedup"], ratio, rel_tol=1e-9)
    if sample["acceptance_rate"] is not None:
        assert 0.0 <= sample["acceptance_rate"] <= 1.0


# -- the real thing, on SmolLM2 --------------------------------------------------------------

@pytest.fixture(scope="module")
def bench_run(session_store, tmp_path_factory):
    """`python -m demo.bench` as a user runs it, with a spy on its real runners that records
    every run's token ids, so the JSON's verdicts can be checked against the tokens."""
    out = tmp_path_factory.mktemp("bench")
    json_path, plot_path = out / "bench.json", out / "bench.png"
    stdout, stderr = io.StringIO(), io.StringIO()
    runs: list = []  # (side, prompt, settings, RunResult), warm-ups included, in order
    real_make_arena = measure._make_arena

    def recording_arena(models, cache_dir):
        arena = real_make_arena(models, cache_dir)
        real_runners = arena.runners
        arena.runners = lambda request, status=lambda m: None: {
            side: RecordingRunner(r, log=runs) for side, r in real_runners(request, status).items()}
        return arena

    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr(measure, "_make_arena", recording_arena)
        rc = cli.main([
            "--preset", SMOLLM2, "--cache-dir", str(session_store.cache_dir),
            "--mode", "sequential", "--assistant-tokens", "2,4", "--repeat", "1",  # fair's old name, an alias
            "--max-new-tokens", "24", "--prompts", "code,summarize", "--limit-prompts", "1",
            "--json", str(json_path), "--plot", str(plot_path),
        ])
    return SimpleNamespace(rc=rc, json_path=json_path, plot_path=plot_path, runs=runs,
                           stdout=stdout.getvalue(), stderr=stderr.getvalue())


def first_difference(a: list, b: list):
    """1-based position where two token sequences first differ, or None if they are equal."""
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i + 1
    return None if len(a) == len(b) else min(len(a), len(b)) + 1


def test_bench_cli_writes_consistent_json(bench_run):
    assert bench_run.rc == 0, bench_run.stderr[-2000:]
    r = json.loads(bench_run.json_path.read_text())
    for key in ("machine", "versions", "preset", "settings", "prompts", "configs", "samples",
                "aggregates", "interrupted"):
        assert key in r
    assert r["interrupted"] is False and r["errors"] == []
    assert r["preset"]["name"] == SMOLLM2
    assert r["settings"]["modes"] == ["fair"] and r["settings"]["assistant_tokens"] == [2, 4]
    for lib in ("openvino", "openvino_genai", "python"):
        assert isinstance(r["versions"][lib], str) and r["versions"][lib]
    assert r["machine"]["cores"] >= 1 and isinstance(r["machine"]["isa_flags"], list)

    prompts, ks, repeats = 2, 2, 1
    assert [p["class"] for p in r["prompts"]] == ["code", "summarize"]
    assert len(r["samples"]) == prompts * ks * repeats
    for s in r["samples"]:
        assert SAMPLE_KEYS <= set(s)
        assert SIDE_KEYS <= set(s[BASELINE]) and SIDE_KEYS | {"accepted", "drafted"} <= set(s[SPECULATIVE])
        assert s["mode"] == "fair" and s["method"] == "draft"
        check_consistent(s)
        assert s["acceptance_rate"] is not None  # OpenVINO reports drafted and accepted tokens

    # Each verdict agrees with the two sides' token ids, compared here. The spy saw every run;
    # a sample is the last run of its prompt and K (the warm-up of a K comes before it).
    texts = {p["id"]: p["text"] for p in r["prompts"]}
    last = {(side, prompt, st.assistant_tokens): res for side, prompt, st, res in bench_run.runs}
    assert len(bench_run.runs) == 2 * (prompts * ks * repeats + ks)  # both sides, samples + warm-ups
    for s in r["samples"]:
        ids = {side: last[(side, texts[s["prompt_id"]], s["assistant_tokens"])].token_ids
               for side in (BASELINE, SPECULATIVE)}
        assert [s[side]["tokens"] for side in ids] == [len(v) for v in ids.values()] == [24, 24]
        # The acceptance curve of the sample is the one its streamed steps give: for guess 1,
        # counted here from the step sizes (the prompt's step out; a last step that kept no
        # guess may have been cut, so it does not count as a rejection).
        sizes = [len(c.token_ids) for c in last[(SPECULATIVE, texts[s["prompt_id"]], s["assistant_tokens"])].chunks][1:]
        curve = s[SPECULATIVE]["acceptance_by_position"]
        assert curve["k"] == s["assistant_tokens"] and curve["kept"][0] == sum(n >= 2 for n in sizes)
        assert curve["reached"][0] == len(sizes) - (sizes[-1] == 1)
        where = first_difference(ids[BASELINE], ids[SPECULATIVE])
        if where is None:
            assert s["verdict"] == "identical"
        else:
            assert re.match(rf"diverged at token {where}\b", s["verdict"]), (s["verdict"], where)

    assert [(a["assistant_tokens"], a["method"]) for a in r["aggregates"]] == [(2, "draft"), (4, "draft")]
    for a in r["aggregates"]:
        assert set(a["classes"]) == {"code", "summarize"} and len(a["prompts"]) == prompts
        assert STAT_KEYS <= set(a["overall"])
        mine = [s[SPECULATIVE]["acceptance_by_position"] for s in r["samples"]
                if s["assistant_tokens"] == a["assistant_tokens"]]
        pooled = a["overall"]["acceptance_by_position"]
        assert pooled["reached"] == [sum(c["reached"][i] for c in mine) for i in range(a["assistant_tokens"])]
        for st in a["classes"].values():
            assert st["speedup"]["median"] > 0 and st["speedup"]["n"] == repeats


def test_bench_cli_prints_table_and_plot(bench_run):
    lines = bench_run.stdout.splitlines()
    header = next(l for l in lines if l.startswith("mode"))
    assert "speedup" in header and "baseline tok/s" in header
    assert sum(l.startswith("fair") for l in lines) == 2 * 3  # 2 K × (2 classes + all)
    data = bench_run.plot_path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_MAGIC)


def test_unknown_preset_is_one_line_error(tmp_path, capsys):
    rc = cli.main(["--preset", "no-such-preset", "--cache-dir", str(tmp_path), "--repeat", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert err.startswith("error: Unknown preset 'no-such-preset'") and "\n" not in err


@pytest.mark.parametrize("argv, expected", [
    (["--assistant-tokens", "2,x"], "error: Assistant tokens are whole numbers"),
    (["--prompts", "poetry"], "error: Unknown prompt class 'poetry'"),
    (["--repeat", "0"], "error: Repeat each prompt at least once"),
    (["--json", "/no/such/folder/out.json"], "error: The folder for --json"),
])
def test_bad_arguments_fail_before_loading(argv, expected, tmp_path, capsys):
    rc = cli.main(["--preset", SMOLLM2, "--cache-dir", str(tmp_path)] + argv)
    assert rc == 1 and capsys.readouterr().err.startswith(expected)


# -- prompts ---------------------------------------------------------------------------------

def test_prompt_set():
    assert len(PROMPTS) >= 12
    for cls in CLASSES:
        assert len([p for p in PROMPTS if p.cls == cls]) >= 4
    assert len({p.id for p in PROMPTS}) == len(PROMPTS)
    assert [p.id for p in select(["summarize", "code"], 2)] == ["summarize-1", "summarize-2", "code-1", "code-2"]
    with pytest.raises(DemoError):
        select(["code"], 0)


# -- bookkeeping with fake runners -----------------------------------------------------------
# The real path (OpenVINO pipelines, the JSON's figures, verdicts checked against token ids)
# is tested above on SmolLM2, and the race itself in test_engine.py. These fakes only reach
# the sweep's bookkeeping that a real run cannot cheaply: many configurations, race mode,
# Ctrl-C, Stop, failed loads and warm-ups. They assert what run_bench does with the runs
# (counts, order, aggregates, interruption, error rows), never a number the fake made up.

class FakeRunner:
    """Emits `max_new_tokens` tokens: one per step on the baseline, K + 1 per step speculatively."""

    def __init__(self, side: str):
        self.side = side

    def run(self, prompt, settings, on_chunk, on_start=lambda t: None, stop=None):
        start = time.perf_counter()
        on_start(start)
        per_step = settings.assistant_tokens + 1 if self.side == SPECULATIVE else 1
        step_s = 0.002 if self.side == SPECULATIVE else 0.001
        result = RunResult(self.side, start=start, end=start)
        left, i = settings.max_new_tokens, 0
        while left > 0:
            n = min(per_step, left)
            chunk = Chunk(self.side, tuple(range(i, i + n)), "x" * n, "", start + (len(result.chunks) + 1) * step_s)
            result.chunks.append(chunk)
            left, i = left - n, i + n
            if not on_chunk(chunk):
                result.cancelled = True
                break
        result.end = result.chunks[-1].t
        if self.side == SPECULATIVE and settings.method == "draft":
            result.ov_accepted_tokens = sum(c.accepted for c in result.chunks)
            result.ov_draft_tokens = settings.assistant_tokens * len(result.chunks)
        return result


class FailingRunner(FakeRunner):
    def run(self, prompt, settings, on_chunk, on_start=lambda t: None, stop=None):
        start = time.perf_counter()
        on_start(start)
        return RunResult(self.side, start=start, end=start, error="RuntimeError: out of memory")


CALIBRATED_K = 3  # differs from models.yaml's K for the fixture (4)


class FakeArena:
    def __init__(self, presets, broken=(), failing=()):
        self.presets = presets
        self.loads = []
        self.broken = broken    # methods whose pipelines fail to load
        self.failing = failing  # methods whose speculative pipeline fails every run

    def prepare(self, name, status=lambda m: None, cancel=None, main_format=None, draft_format=None):
        return SimpleNamespace(main=Path("/fake/main"), draft=Path("/fake/draft"),
                               main_format=main_format or "int4", draft_format=draft_format or "int4")

    def default_assistant_tokens(self, name, mode="race"):
        return CALIBRATED_K  # this machine's calibrated K, which the bench must use by default

    def prepared(self, request):
        return None  # the baseline runs the pair's own main

    def loads_in_turn(self, request):
        return False

    def runners(self, request, status=lambda m: None):
        self.loads.append((request.mode, request.settings.method))
        if request.settings.method in self.broken:
            raise DemoError("OpenVINO could not load the models (boom); check the model folders and devices.")
        spec = FailingRunner if request.settings.method in self.failing else FakeRunner
        return {BASELINE: FakeRunner(BASELINE), SPECULATIVE: spec(SPECULATIVE)}


def test_sweep_bookkeeping_with_fakes(presets, tmp_path):
    arena = FakeArena(presets)
    calls = []
    result = measure.run_bench(
        SMOLLM2, modes=["fair", "race"], assistant_tokens=[1, 3], prompt_lookup=True, repeat=2,
        prompt_classes=["chat", "summarize"], limit_prompts=1, max_new_tokens=12, arena=arena,
        progress=lambda done, total, msg: calls.append((done, total)),
    )
    # one load per (mode, method), never one per K
    assert arena.loads == [("fair", "draft"), ("fair", "prompt_lookup"), ("race", "draft"), ("race", "prompt_lookup")]
    assert len(result.samples) == 2 * 2 * 2 * 2 * 2  # modes × methods × K × prompts × repeat
    assert calls[-1][0] == calls[-1][1] == 2 * 2 * 2 * (1 + 2 * 2)  # warm-ups counted as runs
    assert {s.mode for s in result.samples} == {"fair", "race"}
    for s in result.to_dict()["samples"]:
        check_consistent(s)
    assert len(result.aggregates) == 8 and len(result.configs) == 8
    # The fake speculative side streams K + 1 tokens a step: 12 tokens are 3 steps of 4 with
    # K=3 (two verify steps after the prompt's), 6 of 2 with K=1 (five verify steps); every
    # guess kept. Pooled over 2 prompts × 2 repeats.
    for a in result.aggregates:
        curve = a.overall.acceptance_by_position
        per_sample = {3: 2, 1: 5}[a.assistant_tokens]
        if a.method == "draft":
            assert curve["reached"] == curve["kept"] == [4 * per_sample] * a.assistant_tokens
            assert curve["rate"] == [1.0] * a.assistant_tokens
            assert a.classes["chat"].acceptance_by_position["reached"][0] == 2 * per_sample
    assert all(c.threads_per_pipeline is None for c in result.configs if c.mode == "fair")
    assert "speedup" in report.format_table(result)
    report.write_json(result, tmp_path / "r.json")
    plot.write_plot(result, tmp_path / "r.png")
    assert json.loads((tmp_path / "r.json").read_text())["samples"] == result.to_dict()["samples"]
    assert (tmp_path / "r.png").read_bytes().startswith(PNG_MAGIC)


def test_ctrl_c_keeps_what_was_measured(presets, tmp_path):
    def progress(done, total, msg):
        if done == 3:  # the warm-up and two samples are in
            raise KeyboardInterrupt

    result = measure.run_bench(SMOLLM2, modes=["fair"], assistant_tokens=[2, 4], repeat=3,
                               prompt_classes=["code"], max_new_tokens=8, arena=FakeArena(presets),
                               progress=progress)
    assert result.interrupted is True
    assert len(result.samples) == 2
    assert result.aggregates[0].overall.speedup.n == 2
    assert "interrupted" in report.format_table(result)
    plot.write_plot(result, tmp_path / "partial.png")
    assert (tmp_path / "partial.png").read_bytes().startswith(PNG_MAGIC)


def test_stop_event_ends_the_run(presets):
    stop = threading.Event()

    def progress(done, total, msg):
        if done == 2:
            stop.set()

    result = measure.run_bench(SMOLLM2, modes=["race"], repeat=2, prompt_classes=["chat"], limit_prompts=2,
                               max_new_tokens=8, arena=FakeArena(presets), progress=progress, stop=stop)
    assert result.interrupted is True and len(result.samples) == 1
    assert presets.get(SMOLLM2).assistant_tokens != CALIBRATED_K
    assert result.samples[0].assistant_tokens == CALIBRATED_K  # no K given: the arena's default


def test_interrupted_before_any_sample_still_plots(presets, tmp_path):
    def progress(done, total, msg):
        raise KeyboardInterrupt

    result = measure.run_bench(SMOLLM2, arena=FakeArena(presets), progress=progress, repeat=1)
    assert result.interrupted is True and result.samples == [] and result.aggregates == []
    assert "(no samples)" in report.format_table(result)
    plot.write_plot(result, tmp_path / "empty.png")
    assert (tmp_path / "empty.png").read_bytes().startswith(PNG_MAGIC)


def test_a_failing_configuration_keeps_the_others(presets):
    result = measure.run_bench(SMOLLM2, modes=["fair"], assistant_tokens=[2], prompt_lookup=True,
                               repeat=1, limit_prompts=1, max_new_tokens=8,
                               arena=FakeArena(presets, broken=("prompt_lookup",)))
    assert {s.method for s in result.samples} == {"draft"} and len(result.samples) == 3
    assert [(e.method, e.stage) for e in result.errors] == [("prompt_lookup", "load")]
    assert "failed: preset fair prompt_lookup K=2 (load)" in report.format_table(result)


def test_nothing_measured_is_a_demo_error(presets):
    with pytest.raises(DemoError, match="could not load"):
        measure.run_bench(SMOLLM2, modes=["race"], repeat=1, limit_prompts=1, max_new_tokens=8,
                          arena=FakeArena(presets, broken=("draft",)))
    with pytest.raises(DemoError, match="speculative pipeline failed during the warm-up run: RuntimeError: out of memory"):
        measure.run_bench(SMOLLM2, modes=["race"], repeat=1, limit_prompts=1, max_new_tokens=8,
                          arena=FakeArena(presets, failing=("draft",)))


def test_a_format_sweep_plots_one_line_per_pair(presets, tmp_path, monkeypatch):
    """With several weight-format pairs the left panel shows tok/s per pair over K (and
    each main format alone), not one zig-zag line of speedups across pairs."""
    result = measure.run_bench(SMOLLM2, modes=["fair"], assistant_tokens=[1, 3], repeat=1, prompt_classes=["chat"],
                               limit_prompts=1, max_new_tokens=12, arena=FakeArena(presets),
                               formats=[("int8", "gguf"), ("f16", "int8")])
    assert {a.weights for a in result.aggregates} == {"int8/gguf", "f16/int8"}
    drawn = []
    monkeypatch.setattr(plot, "_plot_formats", lambda ax, aggs, weights, modes: drawn.append(weights))
    plot.write_plot(result, tmp_path / "formats.png")
    assert drawn == [["int8/gguf", "f16/int8"]]
    monkeypatch.undo()
    plot.write_plot(result, tmp_path / "formats.png")
    assert (tmp_path / "formats.png").read_bytes().startswith(PNG_MAGIC)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def test_the_json_names_no_model_path_of_this_machine(presets, tmp_path):
    # The Benchmark tab hands this JSON to visitors: no folder of this machine in it (issue 21).
    from demo.models.presets import LocalSource

    secret = "/home/operator/secret-models/main-ir"
    local = presets.presets[SMOLLM2].model_copy(update={"main": LocalSource(source="local", path=secret)})
    with_local = presets.model_copy(update={"presets": {**presets.presets, SMOLLM2: local}})
    result = measure.run_bench(SMOLLM2, modes=["fair"], assistant_tokens=[2], repeat=1, prompt_classes=["code"],
                               limit_prompts=1, max_new_tokens=8, arena=FakeArena(with_local))
    report.write_json(result, tmp_path / "r.json")
    text = (tmp_path / "r.json").read_text()
    assert "/fake/" not in text and "secret-models" not in text
    paths = [s for s in _strings(json.loads(text)) if s.startswith("/") or s.startswith("~")]
    assert paths == []
    assert result.preset["main"]["path"] == "main-ir" and result.preset["main_folder"] == "main"


# -- the typed JSON form (demo.bench.result) --------------------------------------------------

def test_a_fresh_result_is_exactly_the_documented_form(bench_run, presets, tmp_path):
    """run_bench returns the typed result; every key it writes is in the model
    (extra="forbid") and reads back unchanged, for a real run, a run with a failed
    configuration and one stopped early."""
    from demo.bench.result import BenchResult
    from demo.bench.result import load_result

    written = json.loads(bench_run.json_path.read_text())
    assert load_result(bench_run.json_path).to_dict() == written
    failed = measure.run_bench(SMOLLM2, modes=["fair"], assistant_tokens=[2], prompt_lookup=True, repeat=1,
                               limit_prompts=1, max_new_tokens=8, arena=FakeArena(presets, broken=("prompt_lookup",)))
    stop = threading.Event()
    stop.set()
    stopped = measure.run_bench(SMOLLM2, modes=["race"], repeat=1, limit_prompts=1, max_new_tokens=8,
                                arena=FakeArena(presets), stop=stop)
    for result in (failed, stopped):
        assert isinstance(result, BenchResult)
        report.write_json(result, tmp_path / "r.json")
        assert load_result(tmp_path / "r.json").to_dict() == json.loads((tmp_path / "r.json").read_text())
        assert load_result(tmp_path / "r.json") == result
    assert failed.errors and stopped.interrupted


def test_every_bench_result_in_the_repository_still_loads():
    """bench-results/ keeps the JSON behind BENCHMARKS.md: each reads back as it was written,
    with the old mode name "sequential" read as fair."""
    from demo.bench.result import load_result

    files = [p for p in sorted((Path(__file__).resolve().parent.parent / "bench-results").glob("*.json"))
             if "bench_version" in json.loads(p.read_text())]
    assert files
    old_name = 0
    for path in files:
        raw = json.loads(path.read_text())
        loaded = load_result(path)
        assert {s.mode for s in loaded.samples} <= {"fair", "race"}
        old_name += sum(s["mode"] == "sequential" for s in raw["samples"])
        renamed = json.loads(path.read_text().replace('"mode": "sequential"', '"mode": "fair"'))
        assert loaded.to_dict() == renamed, path.name
    assert old_name > 0  # the alias is exercised, not just allowed


def test_a_file_that_is_not_a_bench_result_is_one_sentence(tmp_path):
    from demo.bench.result import load_result

    calibration = Path(__file__).resolve().parent.parent / "bench-results" / "calibration-qwen-2026-11-30.json"
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path in (calibration, broken, tmp_path / "missing.json"):
        with pytest.raises(DemoError, match=rf"^{re.escape(path.name)} is not a benchmark result.*python -m demo.bench --json") as e:
            load_result(path)
        assert str(tmp_path) not in str(e.value) and "Error" not in str(e.value)


def test_the_report_middle_is_the_median_not_the_mean():
    """One slow outlier (a busy machine) moves the mean, not the median the table prints."""
    d = report.describe([1.0, 1.1, 9.0, None])
    assert d["median"] == 1.1 and d["n"] == 3 and d["mean"] == pytest.approx(11.1 / 3)
    assert report.describe([2.0, 4.0])["median"] == 3.0


