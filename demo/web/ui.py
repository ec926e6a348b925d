"""The arena page (Gradio 6). Knows the engine's facade (demo.engine.arena), not OpenVINO.

One click starts ONE event handler that consumes the engine's merged race stream and
updates both panels. (Two listeners on one click would run one after the other in the
browser, so the panels would not stream at the same time.)
"""

from __future__ import annotations

import threading
import time
from typing import Optional

import gradio as gr

from ..core import placement
from ..core.errors import DemoError
from ..core.settings import MAX_PROMPT_CHARS, GenerationSettings, PipelineOptions
from ..core.streaming import BASELINE, SIDES, SPECULATIVE, ChunkEvent, DoneEvent, StartEvent, StatusEvent
from ..engine.arena import Arena, RaceRequest
from . import checks, render, step_view
from .lanes import LaneState, Shown, Throttle, retimed
from .booth import Booth
from .visitors import VisitorIds

THEME = gr.themes.Soft()


class RaceView:
    """What the page shows during one run; turns engine state into component values.

    Only sides marked dirty are re-rendered, so a side's counters move only when that
    side receives tokens.
    """

    def __init__(self):
        self.sides = {s: LaneState(placeholder="loading…") for s in SIDES}
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
METHODS = {"draft model": "draft", "prompt lookup": "prompt_lookup"}
MAX_NEW_TOKENS_UI = 1024
MAX_ASSISTANT_TOKENS_UI = 16
KEEP_BENCH_RESULTS = 4  # benchmark result folders (JSON + plot) on disk at once; older ones are deleted


def parse_race_inputs(arena: Arena, prompt, preset, main_device, draft_device, method, assistant_tokens,
                      use_threshold, threshold, max_new_tokens, sampling, temperature, top_p, exact,
                      mode) -> RaceRequest:
    """Re-validate every field on the server: the page's widgets bound what a browser sends,
    but anyone can call the API with None, NaN, strings or out-of-range values."""
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


# Race handlers Gradio runs at once. The engine's admission point serializes the heavy part
# (one run on the CPU at a time, first come first served) and tells each waiting visitor
# their place; meanwhile a fair run's replay, which only sleeps, no longer holds the CPU.
RACE_HANDLERS = 4


def preset_choices(arena: Arena) -> list:
    out = []
    for name, p in arena.presets.presets.items():
        reason = arena.needs_operator(name)
        label = f"{name} — {p.description}" if reason is None else \
            f"{name} — not prepared: run `python -m demo.prepare --preset {name}`"
        out.append((label, name))
    return out


def build_demo(arena: Arena, bench_enabled: bool = True, booth: Optional[Booth] = None,
               visitor_ids: VisitorIds = VisitorIds()) -> gr.Blocks:
    booth = booth or Booth()  # kiosk, scoreboard, recordings (demo.web)
    presets = arena.presets
    default = presets.get(None)
    devices = arena.devices()
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
        with gr.Tab("Race", id="race"):
            with gr.Row():
                prompt = gr.Textbox(label="Prompt", lines=3, max_length=MAX_PROMPT_CHARS, elem_id="prompt",
                                    placeholder="Ask something, or pick an example below", scale=5)
                with gr.Column(scale=1, min_width=140):
                    run = gr.Button("Run", variant="primary", elem_id="run")
                    stop = gr.Button("Stop", variant="stop", elem_id="stop")
            examples = gr.Dataset(components=[prompt], samples=[[e] for e in default.examples],
                                  label="Examples", elem_id="examples")
            status = gr.Markdown("", elem_id="status")
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
                gr.Markdown(
                    "Each step, the draft model guesses a few tokens; the main model checks them all in one "
                    "pass and keeps the longest correct prefix, then adds one token of its own. "
                    "<span class='tok-accepted'>Blue</span> text was guessed by the draft (or copied from the "
                    "prompt, with prompt lookup) and accepted; <span class='tok-main'>orange</span> is the token "
                    "the main model produced itself in that step. With greedy decoding the two answers should be "
                    "the same, but outside exact mode the multi-token check can run with other kernels and lower "
                    "precision, so a near-tie may flip and the answers diverge from there; exact mode (f32) "
                    "removes that, at some speed cost."
                )
            with gr.Accordion("Settings", open=False, visible=not booth.kiosk):
                with gr.Row():
                    preset = gr.Dropdown(choices, value=default.name, label="Model pair (preset)", elem_id="preset")
                    mode = gr.Radio(["race: both at once", "fair: each alone, then replayed"],
                                    value="race: both at once", label="How to run", elem_id="mode")
                with gr.Row():
                    main_device = gr.Dropdown(devices, value=devices[0], label="Main model device", elem_id="main-device")
                    draft_device = gr.Dropdown(devices, value=devices[0], label="Draft model device", elem_id="draft-device")
                    method = gr.Radio(["draft model", "prompt lookup"], value="draft model",
                                      label="Speculative method", elem_id="method")
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
                device_note = gr.Markdown("", elem_id="device-note")

            components = {
                "baseline-output": base_out, "baseline-stats": base_stats,
                "speculative-output": spec_out, "speculative-stats": spec_stats,
                "status": status, "summary": summary, "chart": chart, "step-view": steps_html,
                **after_race.components,
            }
            inputs = [prompt, preset, main_device, draft_device, method, assistant_tokens, use_threshold,
                      threshold, max_new_tokens, sampling, temperature, top_p, exact, mode]

            def run_race(http: gr.Request, *values):
                try:
                    request = parse_race_inputs(arena, *values)
                except DemoError as e:
                    raise gr.Error(str(e), print_exception=False)
                view = RaceView()
                view.extra = {**after_race.started(), **step_view.cleared(components)}
                stop_flag = threading.Event()
                try:
                    yield from _stream(arena, request, view, components, stop_flag, after_race.finished,
                                       visitor_ids.keys(http))
                except DemoError as e:
                    raise gr.Error(str(e), print_exception=False)
                finally:
                    stop_flag.set()  # Stop pressed, tab closed, or finished: stop both generate() calls

            # preprocess=False: parse_race_inputs checks every raw value itself. Gradio's own
            # checks answer None or a string in a slider with a bare "the upstream Gradio app
            # has raised an exception", and name Python types in others.
            run_event = run.click(run_race, inputs, list(components.values()),
                                  concurrency_limit=RACE_HANDLERS, concurrency_id="race", api_name="race",
                                  preprocess=False)
            submit_event = prompt.submit(run_race, inputs, list(components.values()),
                                         concurrency_limit=RACE_HANDLERS, concurrency_id="race", preprocess=False,
                                         api_visibility="private")
            stop.click(None, None, None, cancels=[run_event, submit_event])
            # Light events skip the queue: they must never wait behind races, nor fill the queue.
            examples.click(lambda x: x[0], examples, prompt, api_visibility="private", queue=False)
            show_steps.change(None, show_steps, None, api_visibility="private",
                              js="(v) => { document.getElementById('speculative-output').classList.toggle('show-steps', v); }")

            def on_preset(name):
                p = presets.get(name)
                return (gr.Dataset(samples=[[e] for e in p.examples]),
                        gr.Slider(value=arena.default_assistant_tokens(p.name)))

            preset.change(on_preset, preset, [examples, assistant_tokens], api_visibility="private", queue=False)

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

            for device in (main_device, draft_device):
                device.change(on_devices, [main_device, draft_device, method],
                              [method, use_threshold, threshold, exact, device_note],
                              api_visibility="private", queue=False)

        booth.add_tabs(arena, RACE_HANDLERS, visitor_ids)  # Chat, Three-way race, Recorded races, Scoreboard
        booth.install_kiosk(demo, default.examples)
        if bench_enabled:
            with gr.Tab("Benchmark", id="benchmark"):
                _bench_tab(arena, choices, default.name, visitor_ids)

        # The app prepares the default pair when it starts (app.py); the page only shows
        # how far that got, polling cheaply until it is ready.
        ticker = gr.Timer(1.0)

        def startup_status():
            phase, message = arena.startup.get()
            # What OpenVINO crashed on here, and was skipped (demo.engine.safety), stays on the page.
            skipped = "".join(f"\n\n⚠️ {s}." for s in arena.skipped_configurations())
            if phase == "preparing":
                return f"⏳ {message}{skipped}", gr.Timer(active=True)
            if phase == "failed":
                return f"⚠️ {message}{skipped}", gr.Timer(active=False)
            return f"Ready. Type a prompt and press **Run**.{skipped}", gr.Timer(active=False)

        ticker.tick(startup_status, None, [status, ticker], api_visibility="private", queue=False)
        demo.load(startup_status, None, [status, ticker], api_visibility="private", queue=False)
    return demo


def _stream(arena: Arena, request: RaceRequest, view: RaceView, components: dict, stop_flag: threading.Event,
            finished=None, visitor: tuple = ()):
    fair = request.mode == "fair"
    results = {}
    recorded = {s: 0 for s in SIDES}
    throttle = Throttle()
    events = arena.run(request, stop_flag, visitor=visitor)
    try:
        for event in events:
            if isinstance(event, StatusEvent):
                view.status = f"⏳ {event.message}"
                yield view.outputs(components)
                continue
            side = view.sides[event.side]
            view.dirty.add(event.side)
            if isinstance(event, StartEvent):
                if fair:
                    side.placeholder = "measuring alone…"
                    view.status = f"⏳ fair mode: measuring the {event.side} pipeline alone, with all cores"
                else:
                    side.start = event.t
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
        view.extra.update(finished(request, results, summary))
    view.summary = render.summary_html(summary) + render.why_html(summary.why)
    view.histogram = step_view.charts_html(results[SPECULATIVE].chunks, request.settings, step_view.costs(arena, request))
    view.status = ""
    view.dirty.update(SIDES)
    yield view.outputs(components)
    yield from step_view.follow(arena, request, results, view, components, stop_flag)


def _replay(view: RaceView, results: dict, components: dict, stop_flag: threading.Event):
    """Fair mode: play both recorded runs side by side at the pace each had alone."""
    t0 = time.perf_counter()
    for side in SIDES:
        view.sides[side] = LaneState(start=t0, placeholder="")
    view.status = "▶ replaying both runs side by side at their real pace (each was measured alone)"
    throttle = Throttle()
    for item in retimed(results, stop_flag, t0):
        if item is not None:  # None: a heartbeat while it waits, a point where Stop can reach it
            side, chunk = item
            view.sides[side].chunks.append(chunk)
            view.dirty.add(side)
        if throttle.ready():
            yield view.outputs(components)
    for side in SIDES:
        r = results[side]
        view.sides[side].end = t0 + (r.end - r.start)


# A benchmark from the page is bounded: anyone who can load the page can start one.
MAX_BENCH_RUNS = 40
MAX_BENCH_KS = 4
MAX_BENCH_NEW_TOKENS = 256
ASSUMED_TOK_S = 8.0  # for the duration estimate until this machine has measured itself


def bench_plan(arena: Arena, preset_name, mode_list, class_list, ks_text, with_lookup, n_prompts, repeats,
               max_tokens) -> dict:
    """Check a page-started benchmark against the bounds; return its plan with an estimate."""
    from ..bench import benchmark as bench

    preset = arena.presets.get(checks.choice("model pair", preset_name, list(arena.presets.presets)))
    reason = arena.needs_operator(preset.name)
    if reason:
        raise DemoError(reason)
    if (not isinstance(mode_list, list) or not mode_list
            or any(not isinstance(m, str) or m not in bench.MODE_ALIASES for m in mode_list)):
        raise DemoError("Choose at least one mode: fair or race.")
    mode_list = list(dict.fromkeys(bench.MODE_ALIASES[m] for m in mode_list))  # "sequential": the old name
    if not isinstance(class_list, list) or not class_list or any(c not in bench.CLASSES for c in class_list):
        raise DemoError(f"Choose at least one prompt class: {', '.join(bench.CLASSES)}.")
    if not isinstance(ks_text, str) or len(ks_text) > 100:  # the refusal below quotes it back
        raise DemoError("Assistant tokens must be whole numbers separated by commas, e.g. 1,3,5.")
    ks = bench.parse_ints(ks_text) or [preset.assistant_tokens]
    if len(ks) > MAX_BENCH_KS or any(not 1 <= k <= MAX_ASSISTANT_TOKENS_UI for k in ks):
        raise DemoError(f"Sweep at most {MAX_BENCH_KS} assistant-token values, each from 1 to {MAX_ASSISTANT_TOKENS_UI}.")
    lookup = checks.boolean("also prompt lookup", with_lookup)
    n_prompts = checks.number("prompts per class", n_prompts, 1, 5, integer=True)
    repeats = checks.number("repeats", repeats, 1, 5, integer=True)
    max_tokens = checks.number("max new tokens", max_tokens, 16, MAX_BENCH_NEW_TOKENS, integer=True)
    methods = (1 if preset.draft is not None else 0) + (1 if lookup else 0)
    configs = len(mode_list) * max(methods, 1) * len(ks)
    runs = configs * (1 + len(class_list) * n_prompts * repeats)
    if runs > MAX_BENCH_RUNS:
        raise DemoError(f"This plan has {runs} runs; the page allows {MAX_BENCH_RUNS}: use fewer values, or run "
                        "`python -m demo.bench` on the machine itself.")
    seconds = runs * 2 * max_tokens / ASSUMED_TOK_S  # two sides per run
    return dict(preset=preset.name, modes=list(mode_list), classes=list(class_list), ks=ks, lookup=lookup,
                prompts=n_prompts, repeats=repeats, max_tokens=max_tokens, runs=runs, seconds=seconds)


def _bench_tab(arena: Arena, choices: list, default_preset: str, visitor_ids: VisitorIds = VisitorIds()) -> None:
    """Run the benchmark sweep (demo.bench) from the page and show its table and plot."""
    import html
    import queue

    from ..bench import benchmark as bench
    from .files import Downloads

    results = Downloads("bench", keep=KEEP_BENCH_RESULTS)

    gr.Markdown(
        "Runs the built-in prompt set (code, chat, summarization) through both pipelines and "
        "reports tok/s, acceptance and speedup per prompt class: the same measurement as "
        f"`python -m demo.bench`. Greedy, one warm-up per configuration; at most {MAX_BENCH_RUNS} runs "
        "from the page, and it waits its turn like a race."
    )
    with gr.Row():
        preset = gr.Dropdown(choices, value=default_preset, label="Model pair (preset)")
        modes = gr.CheckboxGroup(["fair", "race"], value=["fair"], label="Modes")
        classes = gr.CheckboxGroup(list(bench.CLASSES), value=["code"], label="Prompt classes")
    with gr.Row():
        ks = gr.Textbox("1,3,5", label="Assistant tokens to sweep", elem_id="bench-ks")
        lookup = gr.Checkbox(label="Also prompt lookup", value=False)
        limit = gr.Slider(1, 5, value=1, step=1, label="Prompts per class")
        repeat = gr.Slider(1, 5, value=1, step=1, label="Repeats")
        max_new = gr.Slider(16, MAX_BENCH_NEW_TOKENS, value=64, step=16, label="Max new tokens")
    plan_text = gr.Markdown("", elem_id="bench-plan")
    with gr.Row():
        run = gr.Button("Run benchmark", variant="primary", elem_id="bench-run")
        stop = gr.Button("Stop benchmark", variant="stop", elem_id="bench-stop")
    table = gr.HTML("", elem_id="bench-table")
    plot = gr.Image(label="Speedup vs assistant tokens; tok/s per mode", type="filepath",
                    elem_id="bench-plot", interactive=False)
    download = gr.File(label="Results (JSON, every raw sample)", elem_id="bench-json")
    inputs = [preset, modes, classes, ks, lookup, limit, repeat, max_new]

    def describe_plan(*values):
        try:
            plan = bench_plan(arena, *values)
        except DemoError as e:
            return f"⚠️ {e}"
        return f"Plan: {plan['runs']} runs, roughly {max(1, round(plan['seconds'] / 60))} min on this machine."

    for component in inputs:
        component.change(describe_plan, inputs, plan_text, api_visibility="private", queue=False)

    def run_bench(http: gr.Request, *values):
        try:
            plan = bench_plan(arena, *values)
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
        stop_flag = threading.Event()
        updates: "queue.Queue" = queue.Queue()
        outcome: dict = {}

        def work():
            try:
                ticket = arena.admission.enter("a benchmark", stop_flag, lambda m: updates.put(f"⏳ {m}"))
            except DemoError as e:
                outcome["error"] = str(e)
                updates.put(None)
                return
            try:
                outcome["result"] = bench.run_bench(
                    plan["preset"], modes=plan["modes"], assistant_tokens=plan["ks"], prompt_lookup=plan["lookup"],
                    repeat=plan["repeats"], prompt_classes=plan["classes"], max_new_tokens=plan["max_tokens"],
                    limit_prompts=plan["prompts"], arena=arena, stop=stop_flag,
                    progress=lambda done, total, msg: updates.put(f"⏳ {done}/{total} runs: {msg}"),
                )
            except DemoError as e:
                outcome["error"] = str(e)
            finally:
                ticket.release()
                updates.put(None)

        try:  # one job per visitor (Admission.claim), until this handler ends
            claim = arena.admission.claim("a benchmark", visitor_ids.keys(http))
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
        threading.Thread(target=work, name="page-bench", daemon=True).start()
        try:
            while (message := updates.get()) is not None:
                yield f"<p class='bench-progress'>{html.escape(message)}</p>", None, None
        finally:
            stop_flag.set()  # Stop pressed or tab closed: the sweep ends after the run in flight
            claim.release()
        if "error" in outcome:
            raise gr.Error(outcome["error"], print_exception=False)
        result = outcome["result"]
        out = results.new_folder()
        bench.write_json(result, out / "bench.json")
        bench.write_plot(result, out / "bench.png")
        yield (f"<pre class='bench-table'>{html.escape(bench.format_table(result))}</pre>",
               str(out / "bench.png"), str(out / "bench.json"))

    bench_event = run.click(run_bench, inputs, [table, plot, download],
                            concurrency_limit=1, concurrency_id="bench", api_name="bench", preprocess=False)
    stop.click(None, None, None, cancels=[bench_event])
