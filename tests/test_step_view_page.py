"""The step view and the acceptance curve on the launched page (gradio_client, real SmolLM2
inference), compared with what the engine really streamed."""

import re

import pytest
from gradio_client import Client

from tests.test_app import race_args

SCRIPT_PROMPT = "Write a minimal HTML page with a <script> tag that shows an alert."
NAMES = ["baseline", "baseline_stats", "speculative", "speculative_stats", "status", "summary", "chart", "step_view"]


@pytest.fixture(scope="module")
def client(running_app):
    c = Client(running_app.local_url, verbose=False)
    yield c
    c.close()


def final(job) -> dict:
    job.result(timeout=240)
    return dict(zip(NAMES, job.outputs()[-1]))


def test_a_finished_exact_race_shows_every_step_matching_the_run(client, engine_runs, running_app):
    out = final(client.submit(*race_args(prompt=SCRIPT_PROMPT, k=3, max_new_tokens=40, exact=True), api_name="/race"))
    run = [r for r in engine_runs if r.side == "speculative" and r.prompt == SCRIPT_PROMPT][-1]
    sizes = [len(c.token_ids) for _, c in run.chunks]
    view = out["step_view"]
    kept = [int(k) for k in re.findall(r'<li[^>]*data-kept="(\d+)"', view)]
    assert kept == [n - 1 for n in sizes[1:]] and kept  # one line per verify step, as streamed
    assert 'data-differ="0"' in view and 'data-complete="true"' in view
    assert "<" in "".join(c.text for _, c in run.chunks), "the model wrote no tag this time"
    assert "&lt;" in view and "<script" not in view  # the model's tags show as text
    assert re.search(r'data-position="3" data-rate="[\d.]+"', out["chart"]) and 'id="acceptance-curve"' in out["chart"]
    assert out["status"] == ""  # the reconstruction's status line is gone once it is shown
    # Where this machine is calibrated for the fixture, the curve says where a guess stops paying.
    from demo.models.calibration_store import load_cached

    arena = running_app.arena
    if load_cached(arena.store, arena.presets.get(None)) is not None:
        assert "stops paying after K=" in out["chart"] or "every guess up to K=3 paid" in out["chart"]


def test_a_sampled_race_says_the_step_view_needs_greedy_decoding(client):
    out = final(client.submit(*race_args(max_new_tokens=16, sampling=True), api_name="/race"))
    assert "needs greedy decoding" in out["step_view"] and "<li" not in out["step_view"]


def test_a_prompt_with_a_lone_surrogate_gets_its_step_view(client):
    # The race runs "\ud800" as U+FFFD (arena.validate_prompt); the step view must rebuild the
    # proposals from that same prompt, not fail on the raw one.
    from tests.test_bad_inputs import Raw, call_raw

    args = race_args(prompt="Say \ud800 hi, then count to five.", k=3, max_new_tokens=24, exact=True)
    kind, outputs = call_raw(client.src, "race", Raw(list(args)).body())
    assert kind == "complete", outputs
    view = dict(zip(NAMES, outputs))["step_view"]
    assert re.search(r'data-steps="[1-9]\d*" data-differ="0"', view), view[:300]
