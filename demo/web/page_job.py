"""A heavy job started from the page (the benchmark sweep, the load benchmark): one per visitor,
run in the admission slot on a thread of its own while its progress streams to the page, and
stopped by Stop or a closed tab. The skeleton both Benchmark-tab jobs share."""

from __future__ import annotations

import contextlib
import html
import queue
import threading
from pathlib import Path
from typing import Callable, Iterator

import gradio as gr

from ..core.errors import DemoError
from ..engine.backend import Backend
from .files import Downloads
from .render import SPINNER, WARNING
from .visitors import QueueDoor, owner_of

Say = Callable[[str], None]


def job_controls(prefix: str, what: str, plot_label: str) -> tuple:
    """A Benchmark-tab job's controls under its inputs: (plan line, Run, Stop, table, plot, JSON
    download), with the page ids `<prefix>-plan`, `-run`, `-stop`, `-table`, `-plot`, `-json`."""
    plan_text = gr.Markdown("", elem_id=f"{prefix}-plan")
    with gr.Row():
        run = gr.Button(f"Run {what}", variant="primary", elem_id=f"{prefix}-run")
        stop = gr.Button(f"Stop {what}", variant="stop", elem_id=f"{prefix}-stop")
    table = gr.HTML("", elem_id=f"{prefix}-table")
    plot = gr.Image(label=plot_label, type="filepath", elem_id=f"{prefix}-plot", interactive=False)
    download = gr.File(label="Results (JSON, every raw sample)", elem_id=f"{prefix}-json")
    return plan_text, run, stop, table, plot, download


def planned(make_plan: Callable, inputs: list, plan_text, count_key: str, counted: str) -> Callable[..., dict]:
    """Wire a job's plan line to its inputs: each change shows what `make_plan(*values)` plans
    ("Plan: N <counted>, roughly M min on this machine", from its plan[count_key] and
    plan["seconds"]) or its one-sentence refusal. Returns `check(*values)`: the plan, or the
    refusal as the page's error, for the job's own handler."""
    def describe(*values) -> str:
        try:
            plan = make_plan(*values)
        except DemoError as e:
            return f"{WARNING} {e}"
        return f"Plan: {plan[count_key]} {counted}, roughly {max(1, round(plan['seconds'] / 60))} min on this machine."

    for component in inputs:
        component.change(describe, inputs, plan_text, api_visibility="private", queue=False)

    def check(*values) -> dict:
        try:
            return make_plan(*values)
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
    return check


def heavy_job(arena: Backend, door: QueueDoor, http: gr.Request, what: str,
              job: Callable[[threading.Event, Say], object], thread_name: str) -> Iterator[tuple]:
    """Run `job(stop, say)` in the admission slot for this visitor, yielding (progress HTML, None,
    None) for a tab whose outputs are (table, plot, file) while it runs; returns what it returned.
    A DemoError, from waiting in line or from the job, becomes the page's one-sentence error."""
    stop = threading.Event()
    updates: "queue.Queue" = queue.Queue()
    outcome: dict = {}

    def work():
        try:
            ticket = arena.admission.enter(what, stop, updates.put)
        except DemoError as e:
            outcome["error"] = str(e)
            updates.put(None)
            return
        try:
            outcome["result"] = job(stop, updates.put)
        except DemoError as e:
            outcome["error"] = str(e)
        finally:
            ticket.release()
            updates.put(None)

    with contextlib.ExitStack() as held:
        try:  # one job per visitor (Admission.claim, taken at the queue's door), until this handler ends
            held.enter_context(arena.admission.visiting(what, door.ids.keys(http)))
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
        threading.Thread(target=work, name=thread_name, daemon=True).start()
        try:
            while (message := updates.get()) is not None:
                yield f"<p class='bench-progress'>{SPINNER} {html.escape(message)}</p>", None, None
        finally:
            stop.set()  # Stop pressed or tab closed: the job ends after the run in flight
    if "error" in outcome:
        raise gr.Error(outcome["error"], print_exception=False)
    return outcome["result"]


def result_folder(results: Downloads, door: QueueDoor, http: gr.Request) -> Path:
    """A new folder of this visitor's for a finished job's files (the oldest is deleted)."""
    try:
        return results.new_folder(owner_of(door.ids.keys(http)))
    except DemoError as e:
        raise gr.Error(str(e), print_exception=False)
