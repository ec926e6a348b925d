"""The Three-way race tab: baseline, draft model and prompt lookup on one prompt.

Each lane runs alone with the whole machine (demo.engine.three_way.run, inside the engine's one
admission slot), then the three recorded runs are replayed side by side at their real
pace, and the page says which method won and by how much.
"""

from __future__ import annotations

import html
import threading

import gradio as gr

from ..core.errors import DemoError
from ..core.metrics import DEFINITIONS
from ..core.settings import GenerationSettings
from ..core.streaming import ChunkEvent, DoneEvent, Heartbeat, StartEvent, StatusEvent
from ..engine import three_way
from ..engine.arena import RaceRequest
from . import checks
from .lanes import LanePanels, LanesView, Throttle, replay_into
from .render import PLAY, SPINNER
from .visitors import QueueDoor, VisitorIds
from .prompt_row import prompt_row

MAX_NEW_TOKENS = 512     # three runs one after the other: keep a visitor's wait bounded
MAX_ASSISTANT_TOKENS = 16


def presets_with_a_draft(arena) -> list:
    return [name for name, p in arena.presets.presets.items() if p.draft is not None]


def parse_inputs(arena, prompt, preset, assistant_tokens, max_new_tokens) -> RaceRequest:
    prompt = checks.prompt(prompt)
    names = presets_with_a_draft(arena)
    name = checks.choice("model pair", preset, names)
    reason = arena.needs_operator(name)
    if reason:
        raise DemoError(reason)
    settings = GenerationSettings(
        max_new_tokens=checks.number("max new tokens", max_new_tokens, 1, MAX_NEW_TOKENS, integer=True),
        assistant_tokens=checks.number("assistant tokens", assistant_tokens, 1, MAX_ASSISTANT_TOKENS, integer=True),
    )
    return RaceRequest(prompt=prompt, preset=name, settings=settings, mode="fair")


def summary_html(s: three_way.ThreeWaySummary) -> str:
    """Who won, by how much, and each lane's numbers. Everything escaped."""
    esc = lambda x: html.escape(str(x), quote=True)  # noqa: E731
    rows = [f'<span class="winner">{esc(s.sentence)}</span>']
    table = ["<table class='lanes-table'><tr><th>lane</th><th>tokens</th>"
             f"<th title='{esc(DEFINITIONS['tok/s'])}'>tok/s</th><th>vs baseline</th>"
             f"<th title='{esc(DEFINITIONS['acceptance rate'])}'>acceptance</th><th>output</th></tr>"]
    for lane in three_way.LANES:
        st = s.stats.get(lane)
        if st is None:
            continue
        speed = s.speedups.get(lane)
        acc = s.acceptance.get(lane)
        cells = [three_way.TITLES[lane], f"{st.tokens}", f"{st.tokens_per_s:.1f}",
                 "1.00×" if lane == "baseline" else (f"{speed:.2f}×" if speed is not None else "–"),
                 f"{acc * 100:.0f}%" if acc is not None else "–",
                 "reference" if lane == "baseline" else s.verdicts.get(lane, "")]
        if lane in s.errors:
            cells[-1] = f"failed: {s.errors[lane]}"
        won = " class='won'" if lane == s.winner else ""
        table.append(f"<tr data-lane='{esc(lane)}' data-tokens='{st.tokens}' data-tokens-per-s='{st.tokens_per_s:.4f}'"
                     f"{won}>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    table.append("</table>")
    rows.append("".join(table))
    rows.append(f'<span class="how">{esc(s.how)}</span>')
    margin = f' data-margin="{s.margin:.4f}"' if s.margin is not None else ""
    return (f'<div class="summary three-way" data-winner="{esc(s.winner or "")}"{margin}>'
            + "<br>".join(rows) + "</div>")


def build(arena, booth, race_handlers: int, door=None) -> None:
    door = door or QueueDoor(VisitorIds(), arena.admission)
    visitor_ids = door.ids
    names = presets_with_a_draft(arena)
    default = arena.presets.get(None)
    first = default.name if default.name in names else (names[0] if names else None)
    gr.Markdown(
        "The same prompt through three pipelines: the **main model alone**, the main model checking a "
        "**draft model**'s guesses, and the main model checking guesses **copied from the prompt** "
        "(prompt lookup). Each runs alone with the whole machine, one after the other; then all three "
        "are replayed side by side at the pace each really had. Prompt lookup wins when the answer "
        "repeats the prompt (editing code); a draft model wins on new text."
    )
    if first is None:
        gr.Markdown("No preset here has a draft model, so the three-way race is not available.")
        return
    prompt, run, stop = prompt_row("Prompt", "three-way-prompt", "Run all three", "three-way-run", "three-way-stop", lines=4)
    examples = gr.Dataset(components=[prompt], samples=[[p] for p in three_way.EXAMPLE_PROMPTS],
                          sample_labels=[label for label, _ in three_way.EXAMPLES],
                          label="Examples: where each method wins", elem_id="three-way-examples")
    with gr.Row():
        preset = gr.Dropdown(names, value=first, label="Model pair (preset)", elem_id="three-way-preset")
        k_default = min(arena.default_assistant_tokens(first, "fair"), MAX_ASSISTANT_TOKENS)
        k = gr.Slider(1, MAX_ASSISTANT_TOKENS, value=k_default, step=1,
                      label="Assistant tokens (guesses per step, both methods)", elem_id="three-way-k")
        max_new = gr.Slider(16, MAX_NEW_TOKENS, value=128, step=16, label="Max new tokens",
                            elem_id="three-way-max-new-tokens")
    panels = LanePanels("three-way", three_way.LANES, [three_way.TITLES[lane] for lane in three_way.LANES])
    download = gr.DownloadButton("Download this race as a recording (JSON)", visible=False,
                                 elem_id="three-way-recording", size="sm")
    outputs = panels.components() + [download]

    def run_three(http: gr.Request, *values):
        try:
            request = parse_inputs(arena, *values)
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
        view = LanesView(panels, three_way.LANES)
        view.extra = {download: gr.DownloadButton(visible=False)}
        stop_flag = threading.Event()
        try:
            yield from _stream(arena, booth, request, view, download, stop_flag, visitor_ids.keys(http))
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
        finally:
            stop_flag.set()  # Stop pressed, tab closed, or finished: stop the lane that runs

    event = run.click(run_three, [prompt, preset, k, max_new], outputs, api_name="three_way", preprocess=False,
                      concurrency_limit=race_handlers, concurrency_id="race")
    submit = prompt.submit(run_three, [prompt, preset, k, max_new], outputs, api_visibility="private",
                           preprocess=False, concurrency_limit=race_handlers, concurrency_id="race")
    door.heavy("a three-way race", event, submit)
    stop.click(None, None, None, cancels=[event, submit])
    examples.click(lambda x: x[0], examples, prompt, api_visibility="private", queue=False)


def _stream(arena, booth, request: RaceRequest, view: LanesView, download, stop_flag: threading.Event,
            visitor: tuple = ()):
    results: dict = {}
    measured = {lane: 0 for lane in three_way.LANES}
    throttle = Throttle()
    events = three_way.run(arena, request, stop_flag, visitor, heartbeats=True)
    try:
        for event in events:
            if isinstance(event, Heartbeat):  # a lane loading, a prefill: a yield where Stop can land
                yield view.outputs()
                continue
            if isinstance(event, StatusEvent):
                view.status = f"{SPINNER} {event.message}"
                for name, waiting in view.lane.items():  # each panel says what it waits for
                    if not waiting.chunks and not measured[name] and waiting.placeholder != event.message:
                        waiting.placeholder = event.message
                        view.dirty.add(name)
                yield view.outputs()
                continue
            lane = event.side
            view.dirty.add(lane)
            if isinstance(event, StartEvent):
                view.lane[lane].placeholder = "measuring alone…"
                view.status = f"{SPINNER} measuring the {three_way.TITLES[lane].lower()} lane alone, with all cores"
            elif isinstance(event, ChunkEvent):
                measured[lane] += len(event.chunk.token_ids)
                view.lane[lane].placeholder = f"measuring alone… {measured[lane]} tokens"
            elif isinstance(event, DoneEvent):
                results[lane] = event.result
                if event.result.error:
                    view.lane[lane].note = f"failed: {event.result.error}"
                    view.lane[lane].placeholder = "failed"
                    gr.Warning(f"The {three_way.TITLES[lane].lower()} lane failed: {event.result.error}")
                elif event.result.cancelled:
                    view.lane[lane].note = "stopped"
                else:
                    view.lane[lane].placeholder = f"measured: {measured[lane]} tokens; waiting for the others"
            if isinstance(event, (StartEvent, DoneEvent)) or throttle.ready():
                yield view.outputs()
    finally:
        events.close()  # stops the lane in flight if we got here early
    if stop_flag.is_set() or len(results) < len(three_way.LANES):
        return
    # A failed lane replays as an empty panel with its note; the others at their real pace.
    yield from replay_into(view, results, stop_flag,
                           f"{PLAY} replaying the three runs side by side at their real pace (each was measured alone)")
    if stop_flag.is_set():
        return
    summary = three_way.summarize(results, three_way.how_it_ran(request, arena.options_for(request)))
    view.summary = summary_html(summary)
    view.status = ""
    view.dirty.update(three_way.LANES)
    view.extra.update(booth.finish(arena, request, results, summary.how, "three-way", download, visitor))
    yield view.outputs()
