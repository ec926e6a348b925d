"""The arena page (Gradio 6): the Race tab's layout, the booth's tabs, the Benchmark tab and
the startup line. Knows the engine's front door (demo.engine.backend.Backend), not OpenVINO.

  race_tab.py    the Race tab's checks and its stream into both panels (RaceView, stream_race)
  bench_tab.py   the Benchmark tab (bench_plan and its handler)
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Optional

import gradio as gr

from ..core import placement
from ..core.errors import DemoError
from ..core.settings import MAX_TREE, PipelineOptions
from ..engine.backend import Backend
from . import bench_tab, render, step_view, startup_view
from .booth import Booth
from .race_tab import METHODS, RaceView, method_label, parse_race_inputs, stream_race
from .visitors import QueueDoor, VisitorIds
from .prompt_row import prompt_row

THEME = gr.themes.Soft()

# Race handlers Gradio runs at once. The engine's admission point serializes the heavy part
# (one run on the CPU at a time, first come first served) and tells each waiting visitor
# their place; meanwhile a fair run's replay, which only sleeps, no longer holds the CPU.
RACE_HANDLERS = 4


def preset_choices(arena: Backend) -> list:
    out = []
    for name, p in arena.presets.presets.items():
        reason = arena.needs_operator(name)
        label = f"{name} — {p.description}" if reason is None else \
            f"{name} — not prepared: run `python -m demo.prepare --preset {name}`"
        out.append((label, name))
    return out


def build_demo(arena: Backend, bench_enabled: bool = True, booth: Optional[Booth] = None,
               door: Optional[QueueDoor] = None) -> gr.Blocks:
    """The page; `door` (demo.web.visitors) marks its heavy events, and app.make_demo installs it
    in the page's queue."""
    booth = booth or Booth()  # kiosk, scoreboard, recordings (demo.web)
    door = door or QueueDoor(VisitorIds(), arena.admission)
    default = arena.presets.get(None)
    choices = preset_choices(arena)

    # delete_cache: files handed to visitors (race recordings, CSV, benchmark results) and
    # their uploads are copied into Gradio's cache; an hour later they go, so a booth that
    # runs for days does not fill its disk.
    with gr.Blocks(title="Speculative decoding arena", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(
            "# Speculative decoding arena\n"
            "The same prompt goes through the **main model alone** (left) and the **main model checking "
            "guesses from a small draft model** (right), both on OpenVINO GenAI. The right side usually "
            "finishes first: the main model verifies several guessed tokens in one step."
        )
        # The launch's own progress, apart from each visitor's status line (one status per task).
        startup = gr.HTML(startup_view.startup_html(arena.startup.view(), arena.skipped_configurations()),
                          elem_id="startup")  # a page opened on a ready app shows the skipped ones at once
        with gr.Tab("Race", id="race"):
            race = race_panels(arena, booth, default)
            settings = race_settings(arena, booth, default, choices)
            wire_race(arena, door, race, settings)
            wire_settings(arena, race, settings)

        booth.add_tabs(arena, RACE_HANDLERS, door)  # Chat, Three-way race, Recorded races, Scoreboard
        booth.install_kiosk(demo, default.examples)
        if bench_enabled:
            with gr.Tab("Benchmark", id="benchmark"):
                bench_tab.build(arena, choices, default.name, door)
        wire_startup(arena, demo, startup, settings)
    return demo


def race_panels(arena: Backend, booth: Booth, default) -> SimpleNamespace:
    """The Race tab's prompt row, examples, status, the two panels and what follows a race."""
    prompt, run, stop = prompt_row("Prompt", "prompt", "Run", "run", "stop")
    examples = gr.Dataset(components=[prompt], samples=[[e] for e in default.examples],
                          label="Examples", elem_id="examples")
    status = gr.Markdown("", elem_id="status")  # this visitor's run only; the launch has #startup
    with gr.Row():
        gr.HTML(render.LEGEND_HTML)
        show_steps = gr.Checkbox(label="show step boundaries", value=False, elem_id="show-steps")
    with gr.Row():
        with gr.Column():
            gr.Markdown("### Baseline (main model)")
            base_out = gr.HTML(render.baseline_html([], "waiting for a prompt"), elem_id="baseline-output")
            base_stats = gr.HTML(render.stats_html(None), elem_id="baseline-stats")
        with gr.Column():
            gr.Markdown("### Speculative (main + draft)")
            spec_out = gr.HTML(render.speculative_html([], "waiting for a prompt"), elem_id="speculative-output")
            spec_stats = gr.HTML(render.stats_html(None), elem_id="speculative-stats")
    summary = gr.HTML("", elem_id="summary")
    chart = gr.HTML(render.race_chart_svg({}), elem_id="chart")
    steps_html = step_view.build()  # "Step by step": the draft's guesses, kept and thrown away
    after_race = booth.race_tab(arena)  # the race's recording; every finished race goes on the scoreboard
    with gr.Accordion("What am I looking at?", open=False):
        gr.Markdown(LOOKING_AT)
    components = {
        "baseline-output": base_out, "baseline-stats": base_stats,
        "speculative-output": spec_out, "speculative-stats": spec_stats,
        "status": status, "summary": summary, "chart": chart, "step-view": steps_html,
        **after_race.components,
    }
    return SimpleNamespace(prompt=prompt, run=run, stop=stop, examples=examples, show_steps=show_steps,
                           after_race=after_race, components=components)


LOOKING_AT = (
    "Each step, the draft model guesses a few tokens; the main model checks them all in one "
    "pass and keeps the longest correct prefix, then adds one token of its own. "
    "<span class='tok-accepted'>Blue</span> text was guessed by the draft (or copied from the "
    "prompt, with prompt lookup) and accepted; <span class='tok-main'>orange</span> is the token "
    "the main model produced itself in that step. With greedy decoding the two answers should be "
    "the same, but outside exact mode the multi-token check can run with other kernels and lower "
    "precision, so a near-tie may flip and the answers diverge from there (in fair mode the "
    "baseline may also run another attention backend, where that is this machine's fastest "
    "without a draft); exact mode (f32, one backend) removes that, at some speed cost."
)


def race_settings(arena: Backend, booth: Booth, default, choices: list) -> SimpleNamespace:
    """The Race tab's Settings (hidden in a kiosk): pair, mode, devices, method, K, sampling, exact."""
    devices = arena.devices()
    with gr.Accordion("Settings", open=False, visible=not booth.kiosk):
        with gr.Row():
            preset = gr.Dropdown(choices, value=default.name, label="Model pair (preset)", elem_id="preset")
            mode = gr.Radio(["race: both at once", "fair: each alone, then replayed"],
                            value="race: both at once", label="How to run", elem_id="mode")
        with gr.Row():
            main_device = gr.Dropdown(devices, value=devices[0], label="Main model device", elem_id="main-device")
            draft_device = gr.Dropdown(devices, value=devices[0], label="Draft model device", elem_id="draft-device")
            method = gr.Radio(list(METHODS), value=method_label(default), label="Speculative method", elem_id="method")
        with gr.Row():
            assistant_tokens = gr.Slider(1, 16, value=arena.default_assistant_tokens(default.name), step=1,
                                         label="Assistant tokens (guesses per step)", elem_id="assistant-tokens")
            use_threshold = gr.Checkbox(label="Use a confidence threshold instead", value=False)
            threshold = gr.Slider(0.05, 0.95, value=0.4, step=0.05, label="Assistant confidence threshold")
        with gr.Row():
            max_new_tokens = gr.Slider(16, 1024, value=128, step=16, label="Max new tokens", elem_id="max-new-tokens")
            sampling = gr.Checkbox(label="Sample (otherwise greedy)", value=False)
            temperature = gr.Slider(0.1, 2.0, value=0.7, step=0.05, label="Temperature")
            top_p = gr.Slider(0.05, 1.0, value=0.9, step=0.05, label="Top-p")
            exact = gr.Checkbox(label="Exact mode (f32: greedy outputs must match)", value=False, elem_id="exact")
        # EAGLE-3 only: OpenVINO GenAI drafts a tree of guesses instead of a chain.
        with gr.Row(visible=default.default_method == "eagle3") as tree_row:
            branching = gr.Slider(0, MAX_TREE, value=0, step=1, elem_id="branching-factor",
                                  label="Tree drafting: branching factor (0: a chain of guesses)")
            depth = gr.Slider(0, MAX_TREE, value=0, step=1, elem_id="tree-depth",
                              label="Tree depth (at most the assistant tokens; 0: a chain)")
        device_note = gr.Markdown("", elem_id="device-note")
    return SimpleNamespace(preset=preset, mode=mode, main_device=main_device, draft_device=draft_device,
                           method=method, assistant_tokens=assistant_tokens, use_threshold=use_threshold,
                           threshold=threshold, max_new_tokens=max_new_tokens, sampling=sampling,
                           temperature=temperature, top_p=top_p, exact=exact, tree_row=tree_row,
                           branching=branching, depth=depth, device_note=device_note)


def race_inputs(race: SimpleNamespace, s: SimpleNamespace) -> list:
    """What a race reads, in parse_race_inputs' order."""
    return [race.prompt, s.preset, s.main_device, s.draft_device, s.method, s.assistant_tokens, s.use_threshold,
            s.threshold, s.max_new_tokens, s.sampling, s.temperature, s.top_p, s.exact, s.mode, s.branching, s.depth]


def wire_race(arena: Backend, door: QueueDoor, race: SimpleNamespace, settings: SimpleNamespace) -> None:
    """Run (the button and Enter), Stop, the examples and the step-boundary switch."""
    components, after_race = race.components, race.after_race
    # A session's latest race owns its page: Run (trigger_mode "multiple") is never
    # ignored while the previous race still rebuilds its step view; that step view stops.
    latest_race: dict = {}
    latest_lock = threading.Lock()

    def run_race(http: gr.Request, *values):
        try:
            request = parse_race_inputs(arena, *values)
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
        session, mine = getattr(http, "session_hash", None), threading.Event()
        if session:
            with latest_lock:
                previous, latest_race[session] = latest_race.get(session), mine
            if previous is not None:
                previous.set()
        view = RaceView()
        view.extra = {**after_race.started(), **step_view.cleared(components)}
        stop_flag = threading.Event()
        try:
            yield from stream_race(arena, request, view, components, stop_flag, after_race.finished,
                                   door.ids.keys(http), superseded=mine)
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
        finally:
            stop_flag.set()  # Stop pressed, tab closed, or finished: stop both generate() calls
            with latest_lock:
                if session and latest_race.get(session) is mine:
                    del latest_race[session]

    # preprocess=False: parse_race_inputs checks every raw value itself. Gradio's own
    # checks answer None or a string in a slider with a bare "the upstream Gradio app
    # has raised an exception", and name Python types in others.
    inputs, outputs = race_inputs(race, settings), list(components.values())
    run_event = race.run.click(run_race, inputs, outputs, concurrency_limit=RACE_HANDLERS, concurrency_id="race",
                               api_name="race", preprocess=False, trigger_mode="multiple")
    submit_event = race.prompt.submit(run_race, inputs, outputs, concurrency_limit=RACE_HANDLERS,
                                      concurrency_id="race", preprocess=False, api_visibility="private",
                                      trigger_mode="multiple")
    door.heavy("a race", run_event, submit_event)
    race.stop.click(None, None, None, cancels=[run_event, submit_event])
    # Light events skip the queue: they must never wait behind races, nor fill the queue.
    race.examples.click(lambda x: x[0], race.examples, race.prompt, api_visibility="private", queue=False)
    race.show_steps.change(None, race.show_steps, None, api_visibility="private",
                           js="(v) => { document.getElementById('speculative-output').classList.toggle('show-steps', v); }")


def wire_settings(arena: Backend, race: SimpleNamespace, s: SimpleNamespace) -> None:
    """What a change of pair, method or device changes elsewhere in the Settings (no queue)."""
    presets = arena.presets

    def on_preset(name):
        p = presets.get(name)
        return (gr.Dataset(samples=[[e] for e in p.examples]),
                gr.Slider(value=arena.default_assistant_tokens(p.name)), gr.Radio(value=method_label(p)))

    s.preset.change(on_preset, s.preset, [race.examples, s.assistant_tokens, s.method], api_visibility="private",
                    queue=False)

    def on_method(chosen):
        # Hidden sliders must not hold a tree: it would refuse the next race with no slider in sight.
        eagle3 = METHODS.get(chosen) == "eagle3"
        return gr.Row(visible=eagle3), *([gr.skip()] * 2 if eagle3 else [gr.Slider(value=0)] * 2)

    s.method.change(on_method, s.method, [s.tree_row, s.branching, s.depth], api_visibility="private", queue=False)

    def on_devices(main, draft, chosen_method):
        # An NPU in the pair selects OpenVINO GenAI's stateful backend: no threshold, no prompt lookup.
        options = PipelineOptions(main_device=str(main), draft_device=str(draft))
        npu = placement.uses_npu(options)
        note = "; ".join(placement.notes(options, METHODS.get(chosen_method, "draft")))
        return (gr.Radio(interactive=not npu, value="draft model" if npu else chosen_method),
                gr.Checkbox(interactive=not npu, value=False) if npu else gr.Checkbox(interactive=True),
                gr.Slider(interactive=not npu),
                gr.Checkbox(interactive=not npu, value=False) if npu else gr.Checkbox(interactive=True),
                (note[0].upper() + note[1:] + ".") if note else "")

    for device in (s.main_device, s.draft_device):
        device.change(on_devices, [s.main_device, s.draft_device, s.method],
                      [s.method, s.use_threshold, s.threshold, s.exact, s.device_note],
                      api_visibility="private", queue=False)


def wire_startup(arena: Backend, demo: gr.Blocks, startup, s: SimpleNamespace) -> None:
    """The launch's line, polled cheaply until Ready (app.py prepares the default pair when it
    starts); once Ready, the K slider shows the calibrated K unless the visitor moved it."""
    presets = arena.presets
    ticker = gr.Timer(1.0)
    built_k = s.assistant_tokens.value  # what models.yaml (or a calibration before this launch) said

    def startup_status(k_shown=None, preset_shown=None):
        view = arena.startup.view()
        # What OpenVINO crashed on here, and was skipped (demo.engine.native_guard), stays on the page.
        html = startup_view.startup_html(view, arena.skipped_configurations())
        # The page was built before this launch's calibration: once it is Ready, the K slider
        # shows the calibrated K, unless the visitor has moved it.
        k = gr.skip()
        if view.phase == "ready" and k_shown == built_k and preset_shown in presets.presets:
            calibrated = arena.default_assistant_tokens(preset_shown)
            k = gr.Slider(value=calibrated) if calibrated != k_shown else gr.skip()
        return html, gr.Timer(active=view.phase == "preparing"), k

    status_io = dict(inputs=[s.assistant_tokens, s.preset], outputs=[startup, ticker, s.assistant_tokens],
                     api_visibility="private", queue=False)
    ticker.tick(startup_status, **status_io)
    demo.load(startup_status, **status_io)
