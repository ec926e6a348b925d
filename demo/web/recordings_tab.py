"""The Recorded races tab: replay a race recorded here or elsewhere (demo.records.recording).

Recordings that come with the demo (recordings/*.json, made by `python -m demo.record`)
are offered in a menu, so a booth can show a race before its models are prepared; a
visitor can upload one they downloaded after a race. Either replays at its recorded pace
in the same panels as a live race, labelled with the machine and date it was recorded on.

An upload is a stranger's file: it is read from Gradio's upload folder with a size cap,
validated by demo.records.recording (one sentence when it is refused) and rendered through the
same escaping renderers as live output. The menu's values are names checked against the
list on the server; no path ever comes from the browser.
"""

from __future__ import annotations

import html
import threading

import gradio as gr

from ..core.errors import DemoError
from ..core.settings import METHOD_NAMES
from ..records import playback, recording
from ..records.recording import RecordingError
from . import render, step_view
from .lanes import TITLES, LanePanels, LanesView, replay_into
from .render import PLAY

# Replays only sleep between steps, each bounded by recording.MAX_SECONDS; they have a lane of
# their own ("replay"): this many at once, and at most demo.web.visitors.LANE_WAITING["replay"]
# waiting, so replays never fill the queue that races and chats need.
REPLAY_HANDLERS = 8
SLOTS = ("lane1", "lane2", "lane3")


def _tokens(k: int) -> str:
    return f"{k} assistant token{'s' if k != 1 else ''}"


def label_html(rec: recording.Recording) -> str:
    """"Recorded on <machine>, <date>": a replay must never pass for a live race."""
    esc = lambda x: html.escape(str(x), quote=True)  # noqa: E731
    s = rec.settings
    if rec.kind == "three-way":
        what = f"three-way race, {_tokens(s.assistant_tokens)}"
    else:
        method = METHOD_NAMES.get(s.method, s.method)
        k = _tokens(s.assistant_tokens) if s.assistant_tokens else f"threshold {s.confidence_threshold}"
        what = f"{rec.mode} mode, {method}, {k}"
    formats = ", ".join(f"{role} {fmt}" for role, fmt in (("main", rec.main_format), ("draft", rec.draft_format)) if fmt)
    details = f"{rec.preset} · {what}" + (f" · weights: {formats}" if formats else "")
    return (f'<div class="recorded-label" data-machine="{esc(playback.machine_label(rec))}" '
            f'data-date="{esc(playback.date_label(rec))}">'
            f"{PLAY} <b>Recorded on {esc(playback.machine_label(rec))}, {esc(playback.date_label(rec))}</b>: "
            f"a replay at the pace it had then, not a live race. {esc(details)}"
            f'<br><span class="prompt">Prompt: {esc(rec.prompt)}</span></div>')


def build(booth, admission=None, door=None) -> None:
    """`admission`, `door`: a replay is a visitor's one job too (demo.web.visitors); without them
    (a page built in a test) replays are limited only by their lane."""
    from ..engine.admission import Admission
    from .visitors import QueueDoor, VisitorIds

    admission = admission or Admission()
    door = door or QueueDoor(VisitorIds(), admission)
    shipped = playback.shipped(booth.recordings_dir)
    choices = [(f"{playback.title(rec)} — {playback.machine_label(rec)}, {playback.date_label(rec)}", name)
               for name, rec in shipped.items()]
    gr.Markdown(
        "Replay a race recorded earlier, at the pace it really had: one that comes with the demo, or a "
        "recording you downloaded after a race here (the **Download this race** button under the chart)."
    )
    with gr.Row():
        choice = gr.Dropdown(choices, value=choices[0][1] if choices else None, label="Races recorded with the demo",
                             elem_id="replay-choice", scale=5)
        with gr.Column(scale=1, min_width=140):
            play = gr.Button("Replay", variant="primary", elem_id="replay-run")
            stop = gr.Button("Stop", variant="stop", elem_id="replay-stop")
    upload = gr.File(label=f"…or replay a recording of your own (.json, up to {recording.MAX_BYTES // (1024 * 1024)} MB)",
                     file_types=[".json"], type="filepath", elem_id="replay-upload", height=120)
    label = gr.HTML("", elem_id="replay-label")
    panels = LanePanels("replay", SLOTS, [TITLES["baseline"], TITLES["speculative"], TITLES["lookup"]], shown=2)
    outputs = panels.components() + [label]

    def replay(rec: recording.Recording, http):
        try:
            with admission.visiting("a replay", door.ids.keys(http)):
                yield from _replay(rec)
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)

    def _replay(rec: recording.Recording):
        results = playback.to_results(rec)
        lanes = [lane.name for lane in rec.lanes]
        view = LanesView(panels, lanes, placeholder="")
        view.extra = {label: label_html(rec)}
        view.summary = ""
        stop_flag = threading.Event()
        try:
            yield view.outputs()
            yield from replay_into(view, results, stop_flag, f"{PLAY} replaying a recorded race at its recorded pace")
            if stop_flag.is_set():
                return
            summary = playback.summarize(rec)
            if rec.kind == "three-way":
                from .three_way_tab import summary_html

                view.summary = summary_html(summary)
            else:
                view.summary = render.summary_html(summary)
                view.histogram = step_view.charts_html(results["speculative"].chunks, rec.settings)
            view.status = ""
            view.dirty.update(lanes)
            yield view.outputs()
        finally:
            stop_flag.set()

    def replay_shipped(name, http: gr.Request):
        if not isinstance(name, str) or name not in shipped:
            raise gr.Error("Choose one of the recorded races in the list, then press Replay.", print_exception=False)
        yield from replay(shipped[name], http)

    def replay_upload(path, http: gr.Request):
        if path is None:  # the upload was cleared
            return
        if not isinstance(path, str):
            raise gr.Error(f"Upload a recording file; {recording.WHAT_TO_DO}.", print_exception=False)
        try:
            rec = recording.load(path)
        except RecordingError as e:
            raise gr.Error(str(e), print_exception=False)
        yield from replay(rec, http)

    shipped_event = play.click(replay_shipped, choice, outputs, api_visibility="private",
                               concurrency_limit=REPLAY_HANDLERS, concurrency_id="replay")
    upload_event = upload.upload(replay_upload, upload, outputs, api_visibility="private",
                                 concurrency_limit=REPLAY_HANDLERS, concurrency_id="replay")
    door.heavy("a replay", shipped_event, upload_event)
    stop.click(None, None, None, cancels=[shipped_event, upload_event])
    # Empty the upload box afterwards (replayed or refused), ready for the next file. Both
    # listeners: in Gradio 6.31 `.then` does not fire after a refusal (gr.Error).
    for after in (upload_event.success, upload_event.failure):
        after(lambda: None, None, upload, api_visibility="private", queue=False)
