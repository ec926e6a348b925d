"""The launch's own line (#startup), apart from each visitor's status line: what the app is
preparing, one row per task running side by side, a bar where a task reports a fraction,
and the time left only where the engine could predict it (demo.engine.startup_progress).

Icons are CSS and inline SVG, never characters: a glyph such as an hourglass emoji needs
a font the visitor's machine may lack (Debian's Chromium shows an empty box).
Pure HTML, no Gradio, no OpenVINO.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..core.errors import without_paths
from .render import SPINNER, WARNING
from .render import esc as _esc  # this module's esc also takes out paths


def esc(value) -> str:
    """Escaped for HTML, and without this machine's paths: every visitor reads this line (the terminal has them)."""
    return _esc(without_paths(str(value)))

READY = "Ready. Type a prompt and press <b>Run</b>."


def _ready(message: Optional[str]) -> str:
    """The engine's Ready line (it may say where the machine's choices come from), Run in bold."""
    if not message or not message.startswith("Ready"):
        return READY
    return esc(message).replace("press Run.", "press <b>Run</b>.")


def seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


def _left(task) -> str:
    if task.fraction is not None and task.fraction >= 1.0:
        return "done"
    if task.seconds_left is None:
        return f"{seconds(task.elapsed_s)} so far"
    return f"about {seconds(max(task.seconds_left, 1.0))} left"


def _bar(fraction: Optional[float]) -> str:
    if fraction is None:  # running, amount unknown: a stripe that moves, no number
        return '<span class="bar indeterminate" role="progressbar"><span></span></span>'
    pct = max(0.0, min(fraction, 1.0)) * 100
    return (f'<span class="bar" role="progressbar" aria-valuenow="{pct:.0f}" aria-valuemin="0" '
            f'aria-valuemax="100"><span style="width:{pct:.1f}%"></span></span>')


def _task_html(task, kind: str) -> str:
    pct = "" if task.fraction is None else f" {task.fraction * 100:.0f}%"
    return (f'<div class="startup-{kind}" data-label="{esc(task.label)}">'
            f'<span class="label">{esc(task.label)}</span>{_bar(task.fraction)}'
            f'<span class="left">{pct} &middot; {_left(task)}</span></div>')


def startup_html(view, skipped: Sequence[str] = ()) -> str:
    """The #startup line for a demo.engine.startup_progress.StartupView (or any object with its fields)."""
    notes = "".join(f'<p class="skipped">{WARNING} {esc(s)}.</p>' for s in skipped)
    if view.phase == "failed":
        return f'<div class="startup" data-phase="failed"><p class="problem">{WARNING} {esc(view.message)}</p>{notes}</div>'
    if view.phase != "preparing":
        return f'<div class="startup" data-phase="{esc(view.phase)}"><p>{_ready(view.message)}</p>{notes}</div>'
    if view.warm:
        what, note = "Measuring this machine once before Ready", "races run meanwhile, a little slower"
    else:
        what, note = "Getting the models ready", "press Run meanwhile: the race begins as soon as they are"
    head = (f'<p class="startup-head">{SPINNER} <b>{what}</b> '
            f'<span class="since">(started {seconds(view.elapsed_s)} ago; {note})</span></p>')
    step = _task_html(view.step, "step") if view.step is not None else f"<p>{esc(view.message)}</p>"
    rows = "".join(_task_html(t, "task") for t in view.tasks)
    return f'<div class="startup" data-phase="preparing">{head}{step}{rows}{notes}</div>'


CSS = """
@keyframes spin { to { transform: rotate(360deg); } }
@keyframes slide { from { margin-left: -30%; } to { margin-left: 100%; } }
.spinner { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: -0.1em; border-radius: 50%;
  border: 2px solid var(--border-color-primary); border-top-color: #0072B2; animation: spin 0.9s linear infinite; }
.icon-warning { vertical-align: -0.15em; }
.icon-stop { display: inline-block; width: 0.7em; height: 0.7em; background: currentColor; vertical-align: 0; }
.icon-play { display: inline-block; width: 0; height: 0; border-style: solid; border-width: 0.4em 0 0.4em 0.7em;
  border-color: transparent transparent transparent currentColor; vertical-align: 0; }
.startup { font-size: 14px; }
.startup p { margin: 2px 0; }
.startup .since { color: var(--body-text-color-subdued); font-size: 13px; }
.startup-step, .startup-task { display: flex; align-items: center; gap: 10px; margin: 3px 0; }
.startup-task { padding-left: 1.6em; font-size: 13px; }
.startup .label { flex: 0 1 30em; }
.startup .left { color: var(--body-text-color-subdued); white-space: nowrap; }
.startup .bar { flex: 0 0 180px; height: 8px; border-radius: 4px; overflow: hidden;
  background: var(--border-color-primary); display: inline-block; }
.startup .bar > span { display: block; height: 100%; background: #0072B2; }
.startup .bar.indeterminate > span { width: 30%; animation: slide 1.6s linear infinite; }
.startup .problem { color: #D55E00; }
"""
