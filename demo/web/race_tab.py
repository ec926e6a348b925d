"""The Race tab's engine side: its inputs checked, one run streamed into both panels.

One click starts ONE event handler (stream_race) that consumes the engine's merged race
stream and updates both panels. (Two listeners on one click would run one after the other
in the browser, so the panels would not stream at the same time.) The tab's layout is in
demo.web.ui.build_demo.
"""

from __future__ import annotations

import threading
from typing import Optional

import gradio as gr

from ..core.errors import DemoError
from ..core.settings import MAX_TREE, METHOD_NAMES, GenerationSettings, PipelineOptions
from ..core.streaming import BASELINE, SIDES, SPECULATIVE, ChunkEvent, DoneEvent, Heartbeat, StartEvent, StatusEvent
from ..engine.arena import RaceRequest
from ..engine.backend import Backend
from . import checks, render, step_view
from .lanes import LaneState, Shown, Throttle, paced
from .render import PLAY, SPINNER


class RaceView:
    """What the page shows during one run; turns engine state into component values.

    Only sides marked dirty are re-rendered, so a side's counters move only when that
    side receives tokens.
    """

    def __init__(self):
        self.sides = {s: LaneState(placeholder="waiting for the race to start") for s in SIDES}
        self.dirty = set(SIDES)
        self.status = ""
        self.summary = ""
        self.histogram = ""
        self.extra: dict = {}  # updates of other components (demo.web: the recording download)
        self.shown = Shown()   # every update sends both panels: Gradio sends only their new tails

    def outputs(self, components: dict) -> dict:
        out = {}
        for side in SIDES:
            out[components[f"{side}-output"]], out[components[f"{side}-stats"]] = \
                self.shown.get(side, self.sides[side], side in self.dirty, baseline=side == BASELINE)
        self.dirty.clear()
        out[components["chart"]] = render.race_chart_svg({k: v.series() for k, v in self.sides.items()}) + self.histogram
        out[components["status"]] = self.status
        out[components["summary"]] = self.summary
        out.update(self.extra)
        self.extra = {}
        return out


MODES = {"race: both at once": "race", "fair: each alone, then replayed": "fair"}
METHODS = {label: method for method, label in METHOD_NAMES.items()}  # the radio's labels -> methods


def method_label(preset) -> str:
    """The radio's label for the method a preset races by default (Preset.default_method)."""
    return METHOD_NAMES[preset.default_method]
MAX_NEW_TOKENS_UI = 1024
MAX_ASSISTANT_TOKENS_UI = 16


def parse_race_inputs(arena: Backend, prompt, preset, main_device, draft_device, method, assistant_tokens,
                      use_threshold, threshold, max_new_tokens, sampling, temperature, top_p, exact,
                      mode, branching_factor=0, tree_depth=0) -> RaceRequest:
    """Re-validate every field on the server: the page's widgets bound what a browser sends,
    but anyone can call the API with None, NaN, strings or out-of-range values. A branching
    factor and tree depth of 0 (the sliders' rest) mean a chain of guesses, not a tree."""
    if prompt is not None and not isinstance(prompt, str):
        raise DemoError("The prompt must be text; type a question or pick an example.")
    use_threshold = checks.boolean("use a confidence threshold", use_threshold)
    sampling = checks.boolean("sample", sampling)
    settings = GenerationSettings(
        max_new_tokens=checks.number("max new tokens", max_new_tokens, 1, MAX_NEW_TOKENS_UI, integer=True),
        method=METHODS[checks.choice("speculative method", method, METHODS)],
        assistant_tokens=None if use_threshold else checks.number(
            "assistant tokens", assistant_tokens, 1, MAX_ASSISTANT_TOKENS_UI, integer=True),
        confidence_threshold=checks.number("confidence threshold", threshold, 0.01, 0.99) if use_threshold else None,
        sampling=sampling,
        temperature=checks.number("temperature", temperature, 0.05, 2.0) if sampling else 0.7,
        top_p=checks.number("top-p", top_p, 0.01, 1.0) if sampling else 0.9,
        branching_factor=checks.number("tree branching factor", branching_factor, 0, MAX_TREE, integer=True) or None,
        tree_depth=checks.number("tree depth", tree_depth, 0, MAX_TREE, integer=True) or None,
    )
    devices = arena.devices()
    options = PipelineOptions(main_device=checks.choice("main device", main_device, devices),
                              draft_device=checks.choice("draft device", draft_device, devices),
                              exact=checks.boolean("exact mode", exact))
    preset_name = checks.choice("model pair", preset, list(arena.presets.presets))
    reason = arena.needs_operator(preset_name)
    if reason:
        raise DemoError(reason)
    return RaceRequest(prompt=prompt, preset=preset_name, settings=settings, options=options,
                       mode=MODES[checks.choice("how to run", mode, MODES)])


def stream_race(arena: Backend, request: RaceRequest, view: RaceView, components: dict, stop_flag: threading.Event,
            finished=None, visitor: tuple = (), superseded: Optional[threading.Event] = None):
    fair = request.mode == "fair"
    results = {}
    recorded = {s: 0 for s in SIDES}
    throttle = Throttle()
    events = arena.run(request, stop_flag, visitor=visitor, heartbeats=True)
    try:
        for event in events:
            if isinstance(event, Heartbeat):  # a prefill, a side loading: a yield where Stop can land
                yield {components["status"]: view.status}
                continue
            if isinstance(event, StatusEvent):
                view.status = f"{SPINNER} {event.message}"
                for name, waiting in view.sides.items():  # each panel says what it waits for
                    if not waiting.chunks and waiting.placeholder != event.message:
                        waiting.placeholder = event.message
                        view.dirty.add(name)
                yield view.outputs(components)
                continue
            side = view.sides[event.side]
            view.dirty.add(event.side)
            if isinstance(event, StartEvent):
                if fair:
                    side.placeholder = "measuring alone…"
                    view.status = f"{SPINNER} fair mode: measuring the {event.side} pipeline alone, with all cores"
                else:
                    side.start = event.t
                    side.placeholder = "reading the prompt (prefill)…"
                    view.status = "Racing: both pipelines run at once."
            elif isinstance(event, ChunkEvent):
                if fair:  # recording alone; the panels fill during the replay
                    recorded[event.side] += len(event.chunk.token_ids)
                    side.placeholder = f"measuring alone… {recorded[event.side]} tokens"
                else:
                    side.chunks.append(event.chunk)
            elif isinstance(event, DoneEvent):
                results[event.side] = event.result
                if not fair:
                    side.end = event.result.end
                    # The final chunks: the last one may have gained the text of a character
                    # whose bytes were still incomplete when it streamed.
                    side.chunks = list(event.result.chunks)
                if event.result.error:
                    side.note = f"failed: {event.result.error}"
                    gr.Warning(f"The {event.side} side failed: {event.result.error}")
                elif event.result.cancelled:
                    side.note = "stopped"
            if isinstance(event, (StartEvent, DoneEvent)) or throttle.ready():
                yield view.outputs(components)
    finally:
        events.close()  # stops both generate() calls if we got here early
    if stop_flag.is_set() or len(results) < 2:
        return
    if fair and not any(r.error for r in results.values()):
        yield from _replay(view, results, components, stop_flag)
    summary = arena.summarize(results, request)
    if finished is not None:  # demo.web: a scoreboard row and a recording to download
        view.extra.update(finished(request, results, summary, visitor))
    view.summary = render.summary_html(summary) + render.why_html(summary.why)
    view.histogram = step_view.charts_html(results[SPECULATIVE].chunks, request.settings, step_view.costs(arena, request))
    view.status = ""
    view.dirty.update(SIDES)
    yield view.outputs(components)
    if hasattr(visitor, "give_way"):  # the door's claim: the same session's next Run may supersede the step view
        visitor.give_way()
    yield from step_view.follow(arena, request, results, view, components, stop_flag, superseded)


def _replay(view: RaceView, results: dict, components: dict, stop_flag: threading.Event):
    """Fair mode: play both recorded runs side by side at the pace each had alone."""
    view.status = f"{PLAY} replaying both runs side by side at their real pace (each was measured alone)"
    yield from paced(view.sides, view.dirty, results, stop_flag, lambda: view.outputs(components))
