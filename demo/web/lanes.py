"""Two or three racing lanes side by side: the three-way race and recorded replays.

The same panels as the race tab (demo.web.render's escaping renderers: accepted guesses in
blue, the main model's own token in orange, counters under each panel, the tokens-over-
time chart), for any lanes: baseline + speculative, or baseline + draft + lookup.
"""

from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import gradio as gr

from ..core.metrics import side_stats
from ..core.streaming import Chunk
from ..engine.race import replay
from . import render
from .style import LANE_COLOURS

TITLES = {
    "baseline": "Baseline (main model)",
    "speculative": "Speculative (main + draft)",
    "draft": "Draft model (main + draft)",
    "lookup": "Prompt lookup (main + prompt n-grams)",
}
MIN_UPDATE_INTERVAL_S = 0.1  # as demo.web.ui: at most 10 updates a second


@dataclass
class LaneState:
    chunks: list = field(default_factory=list)
    start: Optional[float] = None
    end: Optional[float] = None
    placeholder: str = ""
    note: str = ""

    def series(self) -> list:
        if self.start is None:
            return []
        n, pts = 0, []
        for c in self.chunks:
            n += len(c.token_ids)
            pts.append((c.t - self.start, n))
        return pts


class LanePanels:
    """The components: a status line, one column per slot (title, output, stats), a summary
    and a chart. Slot i shows whichever lane a view puts there; ids are `<prefix>-<slot>-output`
    and `<prefix>-<slot>-stats`."""

    def __init__(self, prefix: str, slots: Sequence[str], titles: Sequence[str], shown: Optional[int] = None):
        self.prefix = prefix
        self.slots = list(slots)
        self.status = gr.Markdown("", elem_id=f"{prefix}-status")
        self.columns, self.titles, self.outputs, self.stats = [], [], [], []
        with gr.Row():
            for i, (slot, title) in enumerate(zip(slots, titles)):
                with gr.Column(visible=shown is None or i < shown) as column:
                    self.titles.append(gr.Markdown(f"### {title}", elem_classes=["lane-title"],
                                                   elem_id=f"{prefix}-{slot}-title"))
                    self.outputs.append(gr.HTML(render.baseline_html([], "waiting"), elem_id=f"{prefix}-{slot}-output"))
                    self.stats.append(gr.HTML(render.stats_html(None), elem_id=f"{prefix}-{slot}-stats"))
                self.columns.append(column)
        self.summary = gr.HTML("", elem_id=f"{prefix}-summary")
        self.chart = gr.HTML(render.race_chart_svg({}), elem_id=f"{prefix}-chart")

    def components(self) -> list:
        return [self.status, *self.columns, *self.titles, *self.outputs, *self.stats, self.summary, self.chart]


class LanesView:
    """What the panels show during one run. Only lanes marked dirty are re-rendered, so a
    lane's counters move only when it receives tokens (as in demo.web.ui.RaceView)."""

    def __init__(self, panels: LanePanels, lanes: Sequence[str], placeholder: str = "loading…"):
        self.panels = panels
        self.lanes = list(lanes)
        self.lane = {lane: LaneState(placeholder=placeholder) for lane in self.lanes}
        self.dirty = set(self.lanes)
        self.layout = True       # titles and column visibility still to send
        self.status = ""
        self.summary = ""
        self.histogram = ""
        self.extra: dict = {}    # other components' updates to send with the next yield

    def outputs(self) -> dict:
        p = self.panels
        out = {}
        if self.layout:
            for i, column in enumerate(p.columns):
                lane = self.lanes[i] if i < len(self.lanes) else None
                out[column] = gr.Column(visible=lane is not None)
                if lane is not None:
                    out[p.titles[i]] = f"### {TITLES[lane]}"
            self.layout = False
        for lane in self.dirty:
            i = self.lanes.index(lane)
            s = self.lane[lane]
            renderer = render.baseline_html if lane == "baseline" else render.speculative_html
            out[p.outputs[i]] = (f'<div class="lane-output" data-lane="{html.escape(lane)}">'
                                 + renderer(s.chunks, s.placeholder) + "</div>")
            stats = side_stats(s.chunks, s.start, s.end) if s.start is not None else None
            state = "idle" if s.start is None else ("running" if s.end is None else "done")
            out[p.stats[i]] = render.stats_html(stats, s.note, state)
        self.dirty.clear()
        series = {lane: self.lane[lane].series() for lane in self.lanes}
        out[p.chart] = render.race_chart_svg(series, colours=LANE_COLOURS) + self.histogram
        out[p.status] = self.status
        out[p.summary] = self.summary
        out.update(self.extra)
        self.extra = {}
        return out


class Throttle:
    def __init__(self, interval: float = MIN_UPDATE_INTERVAL_S):
        self.interval, self.last = interval, 0.0

    def ready(self) -> bool:
        now = time.perf_counter()
        if now - self.last >= self.interval:
            self.last = now
            return True
        return False


def replay_into(view: LanesView, results: dict, stop: threading.Event, message: str):
    """Play recorded runs (lane -> RunResult) side by side at the pace each had, yielding
    the view's updates; each chunk is re-timed onto the replay clock so the counters read
    like a live race."""
    t0 = time.perf_counter()
    for lane in view.lanes:
        view.lane[lane] = LaneState(start=t0, placeholder="", note=view.lane[lane].note)
    view.dirty.update(view.lanes)
    view.status = message
    yield view.outputs()
    throttle = Throttle()
    for event in replay(results, stop=stop):
        chunk = event.chunk
        t = t0 + (chunk.t - results[event.side].start)
        view.lane[event.side].chunks.append(Chunk(chunk.side, chunk.token_ids, chunk.text, chunk.accepted_text, t))
        view.dirty.add(event.side)
        if throttle.ready():
            yield view.outputs()
    if stop.is_set():
        return
    # Wait out the slowest lane's last step-free stretch (the end of generate()).
    end = max(r.end - r.start for r in results.values())
    left = end - (time.perf_counter() - t0)
    if left > 0:
        stop.wait(left)
    for lane in view.lanes:
        r = results[lane]
        view.lane[lane].end = t0 + (r.end - r.start)
        view.dirty.add(lane)
