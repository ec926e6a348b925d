"""Many requests in one continuous-batching pipeline (demo.engine.batching), the load
benchmark's arithmetic (demo.bench.load) and the crossover record (demo.models.load_store),
with a fake pipeline of OpenVINO's ContinuousBatchingPipeline shape: no model, milliseconds."""

from __future__ import annotations

import statistics
import threading
import time
from types import SimpleNamespace

import pytest

from demo.bench.load import batch_sample, percentile, summarize
from demo.engine.batching import BatchedPipeline
from demo.models import load_store


class FakeHandle:
    def __init__(self, config):
        self.config, self.queue, self.made, self.status = config, [], 0, "RUNNING"

    def can_read(self):
        return bool(self.queue)

    def read(self):
        return {0: SimpleNamespace(generated_ids=self.queue.pop(0))}

    def get_status(self):
        return SimpleNamespace(name=self.status)

    def cancel(self):
        self.status = "CANCEL"


class FakeCB:
    """Each step gives every running request K+1 tokens (K: its num_assistant_tokens), as a
    speculative step whose guesses are all accepted; a plain request gets one."""

    def __init__(self, step_s: float = 0.002):
        self.handles, self.step_s, self.steps = {}, step_s, []  # steps: the request ids each step advanced

    def add_request(self, rid, prompt, config):
        self.handles[rid] = FakeHandle(config)
        return self.handles[rid]

    def has_non_finished_requests(self):
        return any(h.status == "RUNNING" for h in self.handles.values())

    def step(self):
        time.sleep(self.step_s)
        advanced = []
        for rid, h in self.handles.items():
            if h.status != "RUNNING":
                continue
            n = min(1 + getattr(h.config, "num_assistant_tokens", 0), h.config.max_new_tokens - h.made)
            h.queue.append(list(range(h.made, h.made + n)))
            h.made += n
            advanced.append(rid)
            if h.made >= h.config.max_new_tokens:
                h.status = "FINISHED"
        self.steps.append(advanced)


def cfg(max_new_tokens, k=0):
    return SimpleNamespace(max_new_tokens=max_new_tokens, num_assistant_tokens=k)


def test_requests_submitted_together_advance_in_the_same_steps():
    pipe = FakeCB()
    batch = BatchedPipeline(pipe)
    got = {i: [] for i in range(3)}
    reqs = batch.submit_many([(f"p{i}", cfg(12, k=3), lambda ids, t, i=i: got[i].extend(ids) or True)
                              for i in range(3)])
    for r in reqs:
        assert r.done.wait(5)
    # One pipeline, every step advanced all three (judged by the pipeline's own record).
    assert pipe.steps == [[0, 1, 2]] * 3
    assert all(got[i] == list(range(12)) for i in got)
    assert [r.steps[0][1] for r in reqs] == [4, 4, 4] and all(r.sharing == 2 for r in reqs)
    assert all(r.status == "finished" for r in reqs) and [r.running_at_admission for r in reqs] == [1, 2, 3]


def _two_requests(crossover):
    spec, plain = FakeCB(), FakeCB()
    batch = BatchedPipeline(spec, crossover=crossover, plain=plain)
    first_step = threading.Event()
    a = batch.submit("a", cfg(400, k=3), lambda ids, t: first_step.set() or True, plain_config=cfg(400))
    assert first_step.wait(5)  # a is running when b arrives
    b = batch.submit("b", cfg(20, k=3), lambda ids, t: True, plain_config=cfg(20))
    assert a.done.wait(10) and b.done.wait(10)
    return spec, plain, a, b


def test_at_the_crossover_a_new_request_joins_the_plain_pipeline():
    spec, plain, a, b = _two_requests(crossover=2)
    assert a.drafting and not b.drafting and b.running_at_admission == 2
    assert set(spec.handles) == {a.id} and set(plain.handles) == {b.id}
    assert {n for _, n in b.steps} == {1} and a.steps[1][1] == 4  # b never drafted; a kept drafting
    # Both ran at once (one driver stepping both pipelines in turn): b finished before a did.
    assert b.steps[0][0] < a.steps[-1][0] and b.sharing >= 1


def test_below_the_crossover_or_without_one_every_request_drafts():
    for crossover in (None, 3):
        spec, plain, a, b = _two_requests(crossover)
        assert a.drafting and b.drafting and not plain.handles and set(spec.handles) == {a.id, b.id}
        assert b.steps[0][1] == 4


def test_a_request_whose_caller_stops_is_cancelled_within_a_step():
    pipe = FakeCB()
    batch = BatchedPipeline(pipe)
    seen = []
    r = batch.submit("p", cfg(1000), lambda ids, t: seen.append(ids) or len(seen) < 3)
    other = batch.submit("q", cfg(10), lambda ids, t: True)
    assert r.done.wait(5) and other.done.wait(5)
    assert r.status == "cancelled" and len(seen) == 3 and pipe.handles[r.id].status == "CANCEL"
    assert other.status == "finished" and other.tokens == 10


def test_a_failing_step_fails_its_requests_and_the_driver_ends():
    pipe = FakeCB()
    pipe.step = lambda: (_ for _ in ()).throw(RuntimeError("Exception from src/x.cpp:1:\nout of blocks"))
    batch = BatchedPipeline(pipe)
    r = batch.submit("p", cfg(5), lambda ids, t: True)
    assert r.done.wait(5) and r.status == "failed" and r.error == "out of blocks"
    deadline = time.time() + 5
    while batch._thread is not None and time.time() < deadline:
        time.sleep(0.01)
    assert batch._thread is None  # nothing left to run: no thread spins


def test_percentile_matches_linear_interpolation():
    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    # statistics.quantiles(method="inclusive") interpolates between closest ranks as numpy does.
    cuts = statistics.quantiles(xs, n=20, method="inclusive")
    assert percentile(xs, 50) == pytest.approx(statistics.median(xs))
    assert percentile(xs, 95) == pytest.approx(cuts[18])
    assert percentile([], 50) is None and percentile([7.0], 95) == 7.0


def test_a_batch_sample_and_the_summary_from_known_times():
    def req(tag, steps):
        return SimpleNamespace(tag=tag, steps=steps, tokens=sum(n for _, n in steps), status="finished",
                               drafting=True, error=None)

    sample = batch_sample([req("a", [(1.0, 1), (2.0, 4), (3.0, 4)]), req("b", [(1.0, 1), (5.0, 1)])], steps=4, t0=0.0)
    a, b = sample["requests"]
    assert (a["ttft_s"], a["latency_s"], a["decode_tok_s"], a["tokens_per_step"]) == (1.0, 3.0, 4.0, 3.0)
    assert (b["ttft_s"], b["latency_s"], b["decode_tok_s"]) == (1.0, 5.0, 0.25)
    assert sample["aggregate_tok_s"] == 11 / 5.0 and sample["batch_tokens_per_step"] == 11 / 4
    base = dict(sample, aggregate_tok_s=2.0)
    rows = summarize([{"n": 2, "round": 0, "baseline": base, "speculative": sample, "ratio": 1.1},
                      {"n": 2, "round": 1, "baseline": base, "speculative": sample, "ratio": 0.9},
                      {"n": 4, "round": 0, "baseline": base, "speculative": sample, "ratio": 0.8}])
    assert [r["n"] for r in rows] == [2, 4] and rows[0]["ratio_median"] == pytest.approx(1.0)
    # Over both rounds' requests (3, 5, 3, 5 s), as statistics.quantiles interpolates.
    assert rows[0]["speculative"]["latency_s_p95"] == pytest.approx(
        statistics.quantiles([3.0, 5.0, 3.0, 5.0], n=20, method="inclusive")[18])
    assert rows[0]["speculative"]["ttft_s_p50"] == 1.0 and rows[0]["speculative"]["rounds"] == 2


@pytest.mark.parametrize("ratios, crossover", [
    ({1: 1.4, 2: 1.1, 4: 0.97, 8: 0.8}, 4),
    ({1: 1.4, 2: 1.0, 4: 1.2}, 2),     # "at most 1": a tie does not pay
    ({1: 1.4, 2: 1.3}, None),
    ({1: 0.9, 2: 1.2}, 1),
])
def test_the_crossover_is_the_smallest_n_that_stops_paying(ratios, crossover):
    assert load_store.crossover_of(ratios) == crossover


def test_the_load_record_is_saved_per_machine_and_read_back(tmp_path, presets):
    store = SimpleNamespace(cache_dir=tmp_path)
    preset = presets.get("smollm2-self-draft")
    assert load_store.load(store, preset) is None
    record = load_store.save(store, preset, 4, 64, {1: 1.5, 2: 1.2, 4: 0.9, 8: 0.7})
    assert record.crossover == 4
    back = load_store.load(store, preset)
    assert back == record and "from 4 simultaneous requests" in back.sentence()
    path = load_store.path_for(store, preset.name, record.fingerprint)
    assert path.parent == tmp_path / "calibration" and path.name.endswith(".load.json")
    path.write_text("{not json")
    assert load_store.load(store, preset) is None  # damaged: ignored, never fatal


# -- the real thing, on SmolLM2 (two continuous-batching pipelines, tiny runs) ----------------

def test_the_load_benchmark_on_smollm2_batches_and_saves_its_crossover(presets, session_store, smollm2_ir, tmp_path):
    from demo.bench.load import run_load
    from demo.bench.load_report import format_load_table, write_load_plot
    from demo.engine.arena import Arena

    real = Arena(presets, session_store)
    # The record goes to a folder of this test's own, not the shared test cache.
    arena = SimpleNamespace(presets=presets, store=SimpleNamespace(cache_dir=tmp_path), prepare=real.prepare,
                            default_assistant_tokens=real.default_assistant_tokens)
    result = run_load("smollm2-self-draft", concurrency=[2, 1], rounds=1, limit_prompts=1, max_new_tokens=12,
                      assistant_tokens=3, arena=arena)
    assert not result["interrupted"] and [s["n"] for s in result["samples"]] == [1, 2]
    for sample in result["samples"]:
        for side in ("baseline", "speculative"):
            run = sample[side]
            # OpenVINO stops each request at max_new_tokens (code prompts do not end sooner).
            assert [r["tokens"] for r in run["requests"]] == [12] * sample["n"]
            # Batched: the requests advanced in the same pipeline steps, not one after the other.
            assert run["pipeline_steps"] == max(r["steps"] for r in run["requests"])
        # SmolLM2 drafts for itself: every guess is accepted, so a step gives K+1 tokens.
        assert all(r["tokens_per_step"] == 1 for r in sample["baseline"]["requests"])
        assert all(r["tokens_per_step"] > 2 for r in sample["speculative"]["requests"])
    saved = load_store.load(arena.store, presets.get("smollm2-self-draft"))
    ratios = {row["n"]: row["ratio_median"] for row in result["summary"]}
    assert saved is not None and saved.crossover == result["crossover"] == load_store.crossover_of(ratios)
    assert result["record"]["sentence"] == saved.sentence()
    table = format_load_table(result)
    assert table.count("speculative") >= 2 and "Saved for this machine" in table
    write_load_plot(result, tmp_path / "load.png")
    assert (tmp_path / "load.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_why_this_speedup_says_from_how_many_requests_speculation_stops_paying(presets, tmp_path):
    from demo.core.explain import explain
    from demo.core.streaming import RunResult
    from demo.engine.arena import Arena, RaceRequest
    from demo.models.sources import ModelStore
    from demo.web.render import why_html

    arena = Arena(presets, ModelStore(tmp_path))
    request = RaceRequest(prompt="Hi", preset="smollm2-self-draft")
    assert arena.calibration_for(request) is None  # nothing measured here: nothing said
    load_store.save(arena.store, presets.get("smollm2-self-draft"), 4, 64, {1: 1.3, 2: 1.05, 4: 0.92})
    why = explain(RunResult("baseline", 0.0, 1.0), RunResult("speculative", 0.0, 1.0), 1.2, 4,
                  arena.calibration_for(request))
    html = why_html(why)
    assert "speculation stops paying from 4 simultaneous requests on this machine" in html
    assert "Measured speedup 1.20×" in html  # the race's own speedup stays as it was
