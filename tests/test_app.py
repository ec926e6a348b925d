"""The launched page, driven through gradio_client on the SmolLM2 fixture."""

import time

import pytest
from gradio_client import Client

PROMPT = "Write a Python function that reverses a string."


def race_args(prompt=PROMPT, preset="smollm2-self-draft", main_device="CPU", draft_device="CPU",
              method="draft model", k=4, use_threshold=False, threshold=0.4, max_new_tokens=48,
              sampling=False, temperature=0.7, top_p=0.9, exact=False, mode="race: both at once"):
    return (prompt, preset, main_device, draft_device, method, k, use_threshold, threshold,
            max_new_tokens, sampling, temperature, top_p, exact, mode)


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
    assert "speedup" in out["summary"] and "outputs:" in out["summary"]
    assert ("fair mode" in out["summary"]) == mode.startswith("fair")
    assert 'class="tok-accepted"' in out["speculative"]
    assert "line-baseline" in out["chart"] and "line-speculative" in out["chart"]


def test_stop_cancels_and_the_page_stays_usable(client):
    job = client.submit(*race_args(max_new_tokens=1024), api_name="/race")
    t0 = time.time()
    while len(job.outputs()) < 5 and time.time() - t0 < 120:
        time.sleep(0.05)
    job.cancel()
    time.sleep(1.0)
    stopped = final(job)
    assert 'data-tokens="1024"' not in stopped["baseline_stats"]
    # The next run starts at once and completes: nothing it needs was freed or left busy.
    t0 = time.time()
    again = client.submit(*race_args(max_new_tokens=16), api_name="/race")
    again.result(timeout=60)
    assert 'data-tokens="16"' in final(again)["speculative_stats"]
    assert time.time() - t0 < 30


@pytest.mark.parametrize("args, message", [
    (race_args(prompt=""), "The prompt is empty"),
    (race_args(prompt="x" * 17_000), "characters long"),
    # Gradio itself refuses values outside a dropdown's choices, with a readable message.
    (race_args(preset="no-such-preset"), "no-such-preset is not in the list of choices"),
    (race_args(main_device="GPU.3"), "GPU.3 is not in the list of choices"),
    (race_args(max_new_tokens=0), "Value 0 is less than minimum value 16"),
])
def test_bad_inputs_give_readable_errors(client, args, message):
    with pytest.raises(Exception) as info:
        client.predict(*args, api_name="/race")
    text = str(info.value)
    assert message in text
    assert "Traceback" not in text


def test_page_is_usable_after_errors(client):
    out = client.predict(*race_args(max_new_tokens=16), api_name="/race")
    assert 'data-tokens="16"' in out[3]


def test_benchmark_tab_returns_table_plot_and_json(client):
    import json
    from pathlib import Path

    table, plot, data = client.predict("smollm2-self-draft", ["sequential"], ["code"], "2", False, 1, 1, 16,
                                       api_name="/bench")
    assert "speedup" in table and "sequential" in table
    assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads(Path(data).read_text())
    assert len(result["samples"]) == 1 and result["settings"]["assistant_tokens"] == [2]


def test_benchmark_tab_rejects_bad_assistant_tokens(client):
    with pytest.raises(Exception, match="whole numbers separated by commas"):
        client.predict("smollm2-self-draft", ["sequential"], ["code"], "2,x", False, 1, 1, 16, api_name="/bench")
