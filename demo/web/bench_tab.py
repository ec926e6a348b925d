"""The Benchmark tab: the sweep of demo.bench started from the page, bounded, in the admission slot."""

from __future__ import annotations

from typing import Optional

import gradio as gr

from ..core.errors import DemoError
from ..engine.backend import Backend
from . import checks, load_section
from .race_tab import MAX_ASSISTANT_TOKENS_UI
from .page_job import heavy_job, job_controls, planned, result_folder
from .visitors import QueueDoor, VisitorIds

KEEP_BENCH_RESULTS = 4  # benchmark result folders (JSON + plot) on disk at once; older ones are deleted

# A benchmark from the page is bounded: anyone who can load the page can start one.
MAX_BENCH_RUNS = 40
MAX_BENCH_KS = 4
MAX_BENCH_NEW_TOKENS = 256
ASSUMED_TOK_S = 8.0  # for the duration estimate until this machine has measured itself


def bench_plan(arena: Backend, preset_name, mode_list, class_list, ks_text, with_lookup, n_prompts, repeats,
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


def build(arena: Backend, choices: list, default_preset: str, door: Optional[QueueDoor] = None) -> None:
    """Run the benchmark sweep (demo.bench) from the page and show its table and plot."""
    door = door or QueueDoor(VisitorIds(), arena.admission)
    import html

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
    plan_text, run, stop, table, plot, download = job_controls("bench", "benchmark",
                                                               "Speedup vs assistant tokens; tok/s per mode")
    inputs = [preset, modes, classes, ks, lookup, limit, repeat, max_new]

    check = planned(lambda *values: bench_plan(arena, *values), inputs, plan_text, "runs", "runs")

    def run_bench(http: gr.Request, *values):
        plan = check(*values)
        result = yield from heavy_job(arena, door, http, "a benchmark", lambda stop, say: bench.run_bench(
            plan["preset"], modes=plan["modes"], assistant_tokens=plan["ks"], prompt_lookup=plan["lookup"],
            repeat=plan["repeats"], prompt_classes=plan["classes"], max_new_tokens=plan["max_tokens"],
            limit_prompts=plan["prompts"], arena=arena, stop=stop,
            progress=lambda done, total, msg: say(f"{done}/{total} runs: {msg}")), "page-bench")
        out = result_folder(results, door, http)
        bench.write_json(result, out / "bench.json")
        bench.write_plot(result, out / "bench.png")
        yield (f"<pre class='bench-table'>{html.escape(bench.format_table(result))}</pre>",
               str(out / "bench.png"), str(out / "bench.json"))

    bench_event = run.click(run_bench, inputs, [table, plot, download],
                            concurrency_limit=1, concurrency_id="bench", api_name="bench", preprocess=False)
    door.heavy("a benchmark", bench_event)
    stop.click(None, None, None, cancels=[bench_event])
    load_section.build(arena, choices, default_preset, door)  # throughput under load, below the sweep
