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
from typing import Callable, Optional, Sequence

import gradio as gr

from ..core.metrics import side_stats
from ..core.streaming import HEARTBEAT, Chunk, Heartbeat
from ..engine.race import replay
from . import render
from .style import LANE_COLOURS

TITLES = {
    "baseline": "Baseline (main model)",
    "speculative": "Speculative (main + draft)",
    "draft": "Draft model (main + draft)",
    "lookup": "Prompt lookup (main + prompt n-grams)",
}
# Updates are sent at most this often; chunks arriving in between are batched, so a fast
# small model does not flood the browser (or steal the CPU the pipelines race on: on 2
# cores every millisecond of rendering is taken from them). 10 updates a second still reads as live.
MIN_UPDATE_INTERVAL_S = 0.1


@dataclass
class LaneState:
    chunks: list = field(default_factory=list)
    start: Optional[float] = None
    end: Optional[float] = None
    placeholder: str = ""
    note: str = ""
    # The panel's HTML so far: only steps added since the last update are rendered.
    _source: Optional[list] = field(default=None, init=False, repr=False, compare=False)
    _pieces: list = field(default_factory=list, init=False, repr=False, compare=False)

    def series(self) -> list:
        if self.start is None:
            return []
        n, pts = 0, []
        for c in self.chunks:
            n += len(c.token_ids)
            pts.append((c.t - self.start, n))
        return pts

    def output_html(self, baseline: bool) -> str:
        """The panel: the baseline shows plain text, other lanes their accepted guesses. It
        only grows at its end while steps are appended (render.PANEL_OPEN)."""
        if self.chunks is not self._source or len(self.chunks) < len(self._pieces):
            self._source, self._pieces = self.chunks, []  # a new list (a side's final chunks): start over
        for i in range(len(self._pieces), len(self.chunks)):
            c = self.chunks[i]
            self._pieces.append(render.baseline_piece(c) if baseline else render.step_html(i, c))
        body = "".join(self._pieces)
        return render.PANEL_OPEN + body if body else render.placeholder_html(self.placeholder)

    def html(self, baseline: bool) -> tuple[str, str]:
        """(output, stats) HTML."""
        stats = side_stats(self.chunks, self.start, self.end) if self.start is not None else None
        state = "idle" if self.start is None else ("running" if self.end is None else "done")
        return self.output_html(baseline), render.stats_html(stats, self.note, state)


class Shown:
    """What the page shows of each lane, re-rendered only for lanes marked dirty, and sent
    whole at every update: Gradio sends only what changed since the last update (nothing for
    an unchanged string, the new tail for a grown one), whereas a value left out of one
    update makes it send the next one in full."""

    def __init__(self):
        self._html: dict = {}

    def get(self, name: str, lane: LaneState, dirty: bool, baseline: bool) -> tuple[str, str]:
        if dirty or name not in self._html:
            self._html[name] = lane.html(baseline=baseline)
        return self._html[name]


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

    def __init__(self, panels: LanePanels, lanes: Sequence[str], placeholder: str = "waiting for the run to start"):
        self.panels = panels
        self.lanes = list(lanes)
        self.lane = {lane: LaneState(placeholder=placeholder) for lane in self.lanes}
        self.dirty = set(self.lanes)
        self.layout = True       # titles and column visibility still to send
        self.status = ""
        self.summary = ""
        self.histogram = ""
        self.extra: dict = {}    # other components' updates to send with the next yield
        self.shown = Shown()

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
        for i, lane in enumerate(self.lanes):
            text, stats = self.shown.get(lane, self.lane[lane], lane in self.dirty, baseline=lane == "baseline")
            out[p.outputs[i]] = f'<div class="lane-output" data-lane="{html.escape(lane)}">{text}'  # open: see render
            out[p.stats[i]] = stats
        self.dirty.clear()
        series = {lane: self.lane[lane].series() for lane in self.lanes}
        out[p.chart] = render.race_chart_svg(series, colours=LANE_COLOURS) + self.histogram
        out[p.status] = self.status
        out[p.summary] = self.summary
        out.update(self.extra)
        self.extra = {}
        return out


class Throttle:
    """At most one page update per interval: a fast side must not flood the browser."""

    def __init__(self, interval: float = MIN_UPDATE_INTERVAL_S):
        self.interval, self.last = interval, 0.0

    def ready(self) -> bool:
        now = time.perf_counter()
        if now - self.last >= self.interval:
            self.last = now
            return True
        return False


def retimed(results: dict, stop: threading.Event, t0: float):
    """(lane, chunk) of recorded runs at the pace each had, each chunk re-timed onto a replay
    clock started at t0, so the counters read like a live race; HEARTBEAT after each slice of a
    wait (race.replay's heartbeats), so the consumer can yield and be stopped meanwhile."""
    for event in replay(results, stop=stop, heartbeats=True):
        if isinstance(event, Heartbeat):
            yield HEARTBEAT
            continue
        c = event.chunk
        yield event.side, Chunk(c.side, c.token_ids, c.text, c.accepted_text, t0 + (c.t - results[event.side].start))


def replay_into(view: LanesView, results: dict, stop: threading.Event, message: str):
    """Play recorded runs (lane -> RunResult) side by side at the pace each had, into a LanesView."""
    view.status = message
    yield from paced(view.lane, view.dirty, results, stop, view.outputs)


def paced(lanes: dict, dirty: set, results: dict, stop: threading.Event, paint: Callable[[], object]):
    """The one replay of the page (the three-way race, a recording, fair mode's race): recorded
    runs (name -> RunResult) played into `lanes` (name -> LaneState) at the pace each had, marking
    `dirty` what changed; yields paint() at least once per Throttle interval while it waits, so
    Stop or a closed tab reaches it at once, even when the next step is minutes away. Each lane
    ends when its run ended (the slowest lane's last step-free stretch is waited out, in slices)."""
    t0 = time.perf_counter()
    for name in results:
        lanes[name] = LaneState(start=t0, placeholder="", note=lanes[name].note)
    dirty.update(results)
    yield paint()
    throttle = Throttle()
    for item in retimed(results, stop, t0):
        if not isinstance(item, Heartbeat):  # a heartbeat while it waits: a point where Stop can reach it
            name, chunk = item
            lanes[name].chunks.append(chunk)
            dirty.add(name)
        if throttle.ready():
            yield paint()
    if stop.is_set():
        return
    end = max(r.end - r.start for r in results.values())
    while (left := end - (time.perf_counter() - t0)) > 0 and not stop.is_set():
        stop.wait(min(left, MIN_UPDATE_INTERVAL_S))
        yield paint()
    for name in results:
        r = results[name]
        lanes[name].end = t0 + (r.end - r.start)
        dirty.add(name)
