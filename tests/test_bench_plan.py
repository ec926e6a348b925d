"""The Benchmark tab's plan lines (the sweep and the load benchmark share demo.web.page_job.planned):
each change of an input shows the plan or its one-sentence refusal. No model is loaded."""

from __future__ import annotations

import gradio as gr
import pytest

from demo.engine.arena import Arena
from demo.models.presets import load_presets
from demo.models.sources import ModelStore
from demo.web import bench_tab, load_section


def plan_line(blocks, arity: int):
    """The plan describer wired to the tab's inputs (the sweep's tab holds the load section too:
    told apart by how many inputs each takes)."""
    wired = [f for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "describe" and len(f.inputs) == arity]
    found = {f.fn for f in wired}  # one describer, on every input's change
    assert len(found) == 1 and len(wired) == arity, "the tab's plan line is not wired to each of its inputs"
    return found.pop()


@pytest.mark.parametrize("tab, good, bad, counted, refusal", [
    (bench_tab, ("fair",), (), "runs", "Choose at least one mode"),
    (load_section, (1, 2), (), "requests", "Choose at least one number of simultaneous requests"),
])
def test_a_plan_line_shows_the_plan_or_its_refusal(tmp_path, tab, good, bad, counted, refusal):
    presets = load_presets()
    arena = Arena(presets, ModelStore(tmp_path))
    with gr.Blocks() as page:
        tab.build(arena, list(presets.presets), presets.default)

    def values(choice):
        if tab is bench_tab:
            return presets.default, list(choice), ["code"], "2,4", False, 1, 1, 32
        return presets.default, list(choice), 1, 32

    describe = plan_line(page, len(values(good)))
    shown = describe(*values(good))
    assert shown.startswith("Plan: ") and f" {counted}, roughly " in shown and shown.endswith("min on this machine.")
    assert refusal in describe(*values(bad))
