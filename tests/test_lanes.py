"""The lanes of a replay (demo.web.lanes): what each update costs on the wire, and a Stop
that reaches a replay waiting minutes for its next step.

Bytes are counted as Gradio sends them to a browser: each yielded dict becomes one value per
output (a left-out one is Gradio's skip), and each value goes as gradio.utils.diff against
the last one sent, exactly as Blocks.handle_streaming_diffs does for a streaming handler.
"""

import json
import threading

import gradio as gr
import pytest
from gradio.blocks import convert_component_dict_to_list
from gradio.utils import diff

from demo.core.streaming import BASELINE, SPECULATIVE, Chunk, RunResult
from demo.web import render
from demo.web.lanes import LanePanels, LanesView, LaneState, replay_into
from demo.web.race_tab import RaceView

HANG_GUARD_S = 10  # only a hang reaches it: the replay's slice is 0.1 s
STEP_TEXT = '"' * 64  # the most a one-token step may hold; a quote is 6 bytes of HTML


def wire(updates: list, components: list) -> list:
    """Bytes a browser receives for each update after the first, as Gradio sends them."""
    last, sizes = None, []
    for update in updates:
        values = convert_component_dict_to_list(components, update)
        values = [v.constructor_args if isinstance(v, gr.components.Component) else v for v in values]
        if last is not None:
            sizes.append(len(json.dumps([diff(a, b) for a, b in zip(last, values)])))
        last = values
    return sizes


@pytest.fixture(scope="module")
def panels():
    with gr.Blocks():
        return LanePanels("t", ("lane1", "lane2"), ["a", "b"])


def long_lanes(view, steps: int) -> list:
    """Stream `steps` steps of the longest text into the baseline, and every third into the
    speculative lane (a lane that gets nothing in some updates); yield the view's updates."""
    for lane in view.lanes:
        view.lane[lane] = LaneState(start=0.0)
    updates = [view.outputs()]
    for i in range(steps):
        view.lane[BASELINE].chunks.append(Chunk(BASELINE, (i,), STEP_TEXT, "", 0.01 * i))
        view.dirty.add(BASELINE)
        if i % 3 == 0:
            view.lane[SPECULATIVE].chunks.append(Chunk(SPECULATIVE, (i, i + 1), STEP_TEXT * 2, STEP_TEXT, 0.01 * i))
            view.dirty.add(SPECULATIVE)
        updates.append(view.outputs())
    return updates


def test_each_update_sends_the_new_steps_not_the_whole_lane(panels):
    view = LanesView(panels, [BASELINE, SPECULATIVE])
    updates = long_lanes(view, 1500)
    sizes = wire(updates, panels.components())
    lane_bytes = len(updates[-1][panels.outputs[0]])
    assert lane_bytes > 500_000  # the lane the crafted file made, near the cap
    # One update: one step per lane (~400 bytes of escaped quotes each), the chart (at most
    # render.MAX_CHART_POINTS points a line, however long the race) and the counters.
    assert max(sizes) < 16_000, f"an update sent {max(sizes):,} bytes of a {lane_bytes:,}-byte lane"
    # What the panel shows is all of it, rendered once per step.
    text = updates[-1][panels.outputs[0]]
    assert text.endswith(render.baseline_html(view.lane[BASELINE].chunks)[len(render.PANEL_OPEN):])


def test_the_race_tab_sends_the_new_steps_too():
    with gr.Blocks():
        components = {name: gr.HTML() for name in ("baseline-output", "baseline-stats", "speculative-output",
                                                   "speculative-stats", "status", "summary", "chart")}
    view = RaceView()
    updates = [view.outputs(components)]
    for side in (BASELINE, SPECULATIVE):
        view.sides[side].start = 0.0
    for i in range(1500):
        view.sides[BASELINE].chunks.append(Chunk(BASELINE, (i,), STEP_TEXT, "", 0.01 * i))
        view.dirty.add(BASELINE)
        if i % 3 == 0:
            view.sides[SPECULATIVE].chunks.append(Chunk(SPECULATIVE, (i,), STEP_TEXT, "", 0.01 * i))
            view.dirty.add(SPECULATIVE)
        updates.append(view.outputs(components))
    sizes = wire(updates, list(components.values()))
    assert max(sizes) < 16_000, f"an update sent {max(sizes):,} bytes"


def test_incremental_panels_match_the_whole_render():
    base = [Chunk(BASELINE, (i,), f"<b>{i}</b> & ", "", i) for i in range(20)]
    spec = [Chunk(SPECULATIVE, (i, i + 1), f"a{i}<", "a", i) for i in range(20)]
    for chunks, baseline, whole in ((base, True, render.baseline_html), (spec, False, render.speculative_html)):
        lane = LaneState(placeholder="wait")
        assert lane.output_html(baseline) == whole([], "wait")
        for c in chunks:
            lane.chunks.append(c)
            assert lane.output_html(baseline) == whole(lane.chunks)
        lane.chunks = chunks[:5]  # a side's final chunks replace the streamed ones
        assert lane.output_html(baseline) == whole(chunks[:5])


def two_steps_899_s_apart() -> dict:
    return {side: RunResult(side, start=0.0, end=899.0,
                            chunks=[Chunk(side, (1,), "a", "", 0.0), Chunk(side, (2,), "b", "", 899.0)])
            for side in (BASELINE, SPECULATIVE)}


def next_within(stream, what: str):
    """next(stream) as Gradio calls it, in a worker thread; fails (instead of hanging) if it
    does not return: only then can a cancel close the stream."""
    returned, box = threading.Event(), []
    threading.Thread(target=lambda: (box.append(next(stream)), returned.set()), daemon=True).start()
    assert returned.wait(HANG_GUARD_S), what
    return box[0]


def test_a_replay_waiting_minutes_for_its_next_step_can_be_stopped(panels):
    view = LanesView(panels, [BASELINE, SPECULATIVE])
    stop = threading.Event()
    stream = replay_into(view, two_steps_899_s_apart(), stop, "replaying")
    for _ in range(3):  # the first update, then both first steps (one or two updates), then waiting
        next_within(stream, "the replay yielded nothing while it waited: a Stop could not reach it")
    assert all(view.lane[lane].chunks for lane in view.lanes)
    next_within(stream, "the replay yielded nothing while it waited: a Stop could not reach it")
    stream.close()  # as Gradio cancels, once the next() in flight has returned
    assert stop.is_set()  # so whatever else waits on the flag stops as well
    assert [len(view.lane[lane].chunks) for lane in view.lanes] == [1, 1]  # the 899 s step never came
