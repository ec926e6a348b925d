"""The launched page, driven through gradio_client on the SmolLM2 fixture."""

import time

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from tests.conftest import STOP_REACHES_ENGINE_S, steps_after_stop

PROMPT = "Write a Python function that reverses a string."
STORY = "Write a long story about a lighthouse keeper and a storm."
# Chunks stamped closer together than this came out of one delivery, not two steps: the fixture's
# step takes 10-32 ms, and OpenVINO GenAI's streamer runs on a thread of its own, so a token made
# before Stop can reach the callback (where chunks are stamped) together with the next one.
ONE_DELIVERY_S = 0.003


def steps_of(chunks) -> int:
    """How many steps made `chunks`, read from their stamps: a gap under ONE_DELIVERY_S is one delivery."""
    times = sorted(c.t for c in chunks)
    return sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] >= ONE_DELIVERY_S)


def race_args(prompt=PROMPT, preset="smollm2-self-draft", main_device="CPU", draft_device="CPU",
              method="draft model", k=4, use_threshold=False, threshold=0.4, max_new_tokens=48,
              sampling=False, temperature=0.7, top_p=0.9, exact=False, mode="race: both at once", branching=0, depth=0):
    return (prompt, preset, main_device, draft_device, method, k, use_threshold, threshold,
            max_new_tokens, sampling, temperature, top_p, exact, mode, branching, depth)


@pytest.fixture(scope="module")
def client(running_app):
    c = Client(running_app.local_url, verbose=False)
    yield c
    c.close()


def final(job):
    outputs = job.outputs()
    assert outputs, "the race produced no updates"
    return dict(zip(["baseline", "baseline_stats", "speculative", "speculative_stats", "status", "summary", "chart"],
                    outputs[-1]))


@pytest.mark.parametrize("mode", ["race: both at once", "fair: each alone, then replayed"])
def test_full_race_returns_both_texts_and_final_stats(client, mode):
    job = client.submit(*race_args(mode=mode), api_name="/race")
    job.result(timeout=180)
    out = final(job)
    assert "reverse" in out["baseline"] and "reverse" in out["speculative"]
    assert 'data-state="done"' in out["baseline_stats"] and 'data-state="done"' in out["speculative_stats"]
    assert 'data-tokens="48"' in out["baseline_stats"] and 'data-tokens="48"' in out["speculative_stats"]
    assert "speedup" in out["summary"] and '<span class="verdict">outputs ' in out["summary"]
    assert ("fair mode" in out["summary"]) == mode.startswith("fair")
    assert 'class="tok-accepted"' in out["speculative"]
    assert "line-baseline" in out["chart"] and "line-speculative" in out["chart"]


def test_stop_cancels_within_two_steps_and_the_page_stays_usable(client, engine_runs):
    k = 2
    job = client.submit(*race_args(prompt=STORY, k=k, max_new_tokens=1024), api_name="/race")

    def story_runs() -> list:
        return [r for r in engine_runs if r.prompt == STORY]

    def streaming() -> bool:  # the page got updates, and both sides are mid-answer
        runs = story_runs()
        return len(job.outputs()) >= 5 and len(runs) == 2 and all(len(r.chunks) >= 3 for r in runs)

    deadline = time.time() + 120  # hang guard while the pipelines load; normally a few seconds
    while not streaming() and time.time() < deadline:
        time.sleep(0.05)
    assert streaming(), (f"{len(job.outputs())} updates and {[len(r.chunks) for r in story_runs()]} steps "
                         "before Stop: the race did not stream")
    job.cancel()  # what the Stop button does
    cancelled_at = time.perf_counter()
    # Judged in two parts. The page: Stop raises the race's stop flag promptly (Gradio delivers
    # the cancellation to the handler asynchronously: counted from cancel()'s return, a loaded
    # 2-core machine once saw three of the fixture's 32 ms steps). The engine: once it has seen
    # the flag (a child side: when the cancel reached it over its pipe), each side may finish the
    # step in flight and (continuous batching) one more, and then nothing, counted by when the
    # streamer delivered the tokens, a burst being one delivery; the tokens may include one
    # step's made before the flag and delivered with the next (the streamer's own thread).
    runs = story_runs()
    assert sorted(r.side for r in runs) == ["baseline", "speculative"]
    for r in runs:
        assert r.done.wait(60), f"the {r.side} run did not end after Stop"  # hang guard
        assert r.stop_set_at is not None and r.stop_set_at - cancelled_at < STOP_REACHES_ENGINE_S, (
            f"{r.side}: Stop raised no stop flag within {STOP_REACHES_ENGINE_S} s")
        seen = r.result.stop_seen_at
        assert seen is None or seen - r.stop_set_at < STOP_REACHES_ENGINE_S, (
            f"{r.side}: the stop flag took {seen - r.stop_set_at:.2f} s to reach its engine")
        late = steps_after_stop(r)
        assert steps_of(late) <= 2, (f"{r.side}: {steps_of(late)} steps after its engine saw the stop flag "
                                     f"(chunks at {[round(c.t - r.stop_set_at, 4) for c in late]} s after the flag)")
        assert r.result.cancelled and r.result.error is None
        assert sum(len(c.token_ids) for c in late) <= 3 * (k + 1 if r.side == "speculative" else 1)
    # The next run completes: nothing it needs was freed or left busy.
    again = client.submit(*race_args(max_new_tokens=16), api_name="/race")
    again.result(timeout=60)
    assert 'data-tokens="16"' in final(again)["speculative_stats"]


@pytest.mark.parametrize("args, message", [
    (race_args(prompt=""), "The prompt is empty"),
    (race_args(prompt="x" * 17_000), "characters long"),
    # The server re-checks every value, whatever the client sends (tests/test_bad_inputs.py
    # has the full list); the page's own limits say what to do.
    (race_args(preset="no-such-preset"), "The setting 'model pair' must be one of: "),
    (race_args(main_device="GPU.3"), "The setting 'main device' must be one of: CPU"),
    (race_args(max_new_tokens=0), "The setting 'max new tokens' must be a whole number from 1 to"),
])
def test_bad_inputs_give_readable_errors(client, args, message):
    with pytest.raises(AppError) as info:
        client.predict(*args, api_name="/race")
    text = str(info.value)
    assert message in text
    assert "Traceback" not in text and "\n" not in text.strip()


def test_page_is_usable_after_errors(client):
    out = client.predict(*race_args(max_new_tokens=16), api_name="/race")
    assert 'data-tokens="16"' in out[3]


def test_benchmark_tab_returns_table_plot_and_json(client):
    import json
    from pathlib import Path

    table, plot, data = client.predict("smollm2-self-draft", ["fair"], ["code"], "2", False, 1, 1, 16,
                                       api_name="/bench")
    assert "speedup" in table and "fair" in table
    assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads(Path(data).read_text())
    assert len(result["samples"]) == 1 and result["settings"]["assistant_tokens"] == [2]


def test_benchmark_tab_rejects_bad_assistant_tokens(client):
    with pytest.raises(AppError, match="whole numbers separated by commas"):
        client.predict("smollm2-self-draft", ["fair"], ["code"], "2,x", False, 1, 1, 16, api_name="/bench")
