"""Stop pressed while waiting in line, as a stranger sends it: gradio_client's job.cancel()
on the real page (SmolLM2 fixture). Judged by the admission point's line and by what the
engine ran (the engine_runs spy), in order: never by how long something took."""

import time

import pytest
from gradio_client import Client

from .test_app import race_args

WAITING = "Name one colour of the rainbow."   # only the job that is cancelled asks this
AFTER = "Name one planet of the solar system."
HANG_GUARD_S = 120  # only a hang reaches it (the warm-up may still hold the machine at first)


@pytest.fixture(scope="module")
def client(running_app):
    c = Client(running_app.local_url, verbose=False)
    yield c
    c.close()


def until(condition, what: str):
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def test_stop_while_waiting_in_line_is_heard_and_the_job_never_runs(running_app, client, engine_runs):
    admission = running_app.arena.admission
    holder = admission.enter("a test holding the machine", timeout_s=HANG_GUARD_S)
    try:
        job = client.submit(*race_args(prompt=WAITING, max_new_tokens=16), api_name="/race")
        until(lambda: admission.state()["waiting"] == 1, "the race waiting in line")
        until(lambda: any("run ahead of you" in str(o) for o in job.outputs()), "the page saying its place")
        # Before the fix, /cancel waited for the handler's next update, which came only when
        # its place changed: gradio_client's request timed out and the job stayed in line.
        job.cancel()
        until(lambda: admission.state()["waiting"] == 0, "the cancelled job leaving the line")
    finally:
        holder.release()
    # The next visitor is served; the cancelled job, first in line had it stayed, never ran.
    after = client.submit(*race_args(prompt=AFTER, max_new_tokens=8), api_name="/race")
    after.result(timeout=HANG_GUARD_S)
    assert any(r.prompt == AFTER for r in engine_runs)
    assert not any(r.prompt == WAITING for r in engine_runs), "the cancelled job took the slot and ran"
