"""The Benchmark tab's "Throughput under load": demo.bench.load from the page, bounded, one job,
in the admission slot like the sweep. It reports throughput, never a race's speedup."""

from __future__ import annotations

from typing import Optional

import gradio as gr

from ..core.errors import DemoError
from ..engine.backend import Backend
from . import checks
from .page_job import heavy_job, job_controls, planned, result_folder
from .visitors import QueueDoor, VisitorIds

LOAD_CHOICES = (1, 2, 4, 8)
MAX_LOAD_REQUESTS = 90       # requests in all (both sides, every round): anyone who can load the page can start one
MAX_LOAD_NEW_TOKENS = 128
ASSUMED_BATCH_TOK_S = 12.0   # for the estimate only: aggregate tok/s of a batch on a small CPU
KEEP_LOAD_RESULTS = 4


def load_plan(arena: Backend, preset_name, ns, rounds, max_tokens) -> dict:
    """Check a page-started load benchmark against the bounds; return its plan with an estimate."""
    preset = arena.presets.get(checks.choice("model pair", preset_name, list(arena.presets.presets)))
    reason = arena.needs_operator(preset.name)
    if reason:
        raise DemoError(reason)
    if preset.draft is None:
        raise DemoError("This model pair has no draft model; the load benchmark compares a draft pair.")
    if not isinstance(ns, list) or not ns or any(n not in LOAD_CHOICES for n in ns):
        raise DemoError(f"Choose at least one number of simultaneous requests: {', '.join(map(str, LOAD_CHOICES))}.")
    rounds = checks.number("rounds", rounds, 1, 3, integer=True)
    max_tokens = checks.number("max new tokens", max_tokens, 16, MAX_LOAD_NEW_TOKENS, integer=True)
    ns = sorted(set(ns))
    requests = 2 * rounds * sum(ns)
    if requests > MAX_LOAD_REQUESTS:
        raise DemoError(f"This plan sends {requests} requests; the page allows {MAX_LOAD_REQUESTS}: use fewer rounds "
                        "or request counts, or run `python -m demo.bench --concurrency 1,2,4,8` on the machine.")
    seconds = requests * max_tokens / ASSUMED_BATCH_TOK_S + 30  # + loading both pipelines
    return dict(preset=preset.name, ns=ns, rounds=rounds, max_tokens=max_tokens, requests=requests, seconds=seconds)


def build(arena: Backend, choices: list, default_preset: str, door: Optional[QueueDoor] = None) -> None:
    import html

    from ..bench.load import run_load
    from ..bench.load_report import format_load_table, write_load_json, write_load_plot
    from .files import Downloads

    door = door or QueueDoor(VisitorIds(), arena.admission)
    results = Downloads("load", keep=KEEP_LOAD_RESULTS)
    with gr.Accordion("Throughput under load: when does speculation stop paying?", open=False):
        gr.Markdown(
            "Sends N requests at once to one continuous-batching pipeline, the baseline and then the speculative "
            "one, and compares the tokens per second of the whole batch. This is throughput for many visitors, "
            "not a race: the race's speedup is one visitor's latency. The N from which speculation stops paying "
            "is saved for this machine and shown under \"Why this speedup?\"."
        )
        with gr.Row():
            preset = gr.Dropdown(choices, value=default_preset, label="Model pair (preset)")
            ns = gr.CheckboxGroup(list(LOAD_CHOICES), value=[1, 2, 4], label="Simultaneous requests (N)",
                                  elem_id="load-ns")
            rounds = gr.Slider(1, 3, value=1, step=1, label="Rounds (baseline, speculative in turn)")
            max_new = gr.Slider(16, MAX_LOAD_NEW_TOKENS, value=48, step=16, label="Max new tokens")
        plan_text, run, stop, table, plot, download = job_controls("load", "load benchmark",
                                                                   "Aggregate tok/s, ratio and latency vs N")
    inputs = [preset, ns, rounds, max_new]

    check = planned(lambda *values: load_plan(arena, *values), inputs, plan_text, "requests", "requests")

    def run_load_job(http: gr.Request, *values):
        plan = check(*values)

        def job(stop, say):
            clear = getattr(arena.cache, "clear", None)
            if clear is not None:  # the race's pipelines make room for the two batched ones
                clear()
            return run_load(plan["preset"], concurrency=plan["ns"], rounds=plan["rounds"],
                            max_new_tokens=plan["max_tokens"], arena=arena, stop=stop,
                            progress=lambda done, total, msg: say(f"{done}/{total}: {msg}"))

        result = yield from heavy_job(arena, door, http, "a load benchmark", job, "page-load-bench")
        out = result_folder(results, door, http)
        write_load_json(result, out / "load.json")
        write_load_plot(result, out / "load.png")
        yield (f"<pre class='bench-table' data-crossover='{result['crossover'] or ''}'>"
               f"{html.escape(format_load_table(result))}</pre>", str(out / "load.png"), str(out / "load.json"))

    load_event = run.click(run_load_job, inputs, [table, plot, download],
                           concurrency_limit=1, concurrency_id="bench", api_name="load_bench", preprocess=False)
    door.heavy("a load benchmark", load_event)
    stop.click(None, None, None, cancels=[load_event])
