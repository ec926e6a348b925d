"""After a race: the acceptance curve by position (beside the histogram) and the step view,
which lists the draft's guesses at every main-model step, kept and thrown away.

HTML here is built from model output and token texts: everything goes through render.esc.
The engine computes (demo.core.acceptance, demo.engine.steps); this module only draws.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional, Sequence

from ..core.acceptance import AcceptanceCurve, Payoff, curve_of_chunks, payoff
from ..core.errors import DemoError
from ..core.streaming import SIDES, SPECULATIVE
from ..engine.request import SOURCE_NAMES
from . import render
from .lanes import Throttle
from .render import SPINNER

# Its CSS is in demo.web.style (STEP_VIEW_CSS), which the app passes to Gradio with the page's.


def _pct(x: Optional[float]) -> str:
    return "–" if x is None else f"{x * 100:.0f}%"


def curve_html(curve: Optional[AcceptanceCurve], pay: Optional[Payoff] = None, method: str = "draft",
               width: int = 320, height: int = 140) -> str:
    """The chance each guess was kept, given the ones before it were (id acceptance-curve)."""
    if curve is None:
        body = "<p>The acceptance curve needs a fixed number of assistant tokens (no confidence threshold).</p>"
        return f'<div id="acceptance-curve" class="accept-curve">{body}</div>'
    if curve.steps == 0:
        return '<div id="acceptance-curve" class="accept-curve" data-steps="0"><p>No verify step, no curve.</p></div>'
    bar_w = (width - 40) / curve.k
    out = [f'<svg viewBox="0 0 {width} {height}" width="{width}" role="img" '
           f'aria-label="chance each guess was kept, given the ones before it were">']
    for p in curve.positions:
        x = 30 + (p.index - 1) * bar_w
        h = (p.rate or 0.0) * (height - 40)
        out.append(f'<rect class="curve-bar" data-position="{p.index}" data-rate="{"" if p.rate is None else f"{p.rate:.4f}"}" '
                   f'data-reached="{p.reached}" data-kept="{p.kept}" x="{x + 2:.1f}" y="{height - 20 - h:.1f}" '
                   f'width="{bar_w - 4:.1f}" height="{h:.1f}" fill="{render.SPECULATIVE_COLOUR}">'
                   f'<title>guess {p.index}: kept {p.kept} of {p.reached} times it was reached</title></rect>')
        out.append(f'<text x="{x + bar_w / 2:.1f}" y="{height - 6}" font-size="11" text-anchor="middle" '
                   f'fill="#888">{p.index}</text>')
        out.append(f'<text x="{x + bar_w / 2:.1f}" y="{height - 24 - h:.1f}" font-size="11" text-anchor="middle" '
                   f'fill="#888">{_pct(p.rate)}</text>')
    out.append(f'<text x="{width / 2}" y="12" font-size="11" text-anchor="middle" fill="#888">'
               f'guess kept, given the ones before it were (by position)</text></svg>')
    rows = []
    tau = curve.tokens_per_step()
    if tau is not None:
        rows.append(f"These rates give {tau:.2f} tokens per verify step with K={curve.k} (the main model's own "
                    "token included; the measured mean, but for a last step cut short).")
    if method == "prompt_lookup":
        rows.append("Prompt lookup: a step whose text had no matching n-gram made no guess and counts as a miss.")
    if pay is not None and pay.best_k is not None:
        if pay.stops_paying_at is not None:
            rows.append(f"On this machine one more guess stops paying after K={pay.stops_paying_at} "
                        f"(calibrated costs; fastest K={pay.best_k} of 1–{curve.k}).")
        else:
            rows.append(f"On this machine every guess up to K={curve.k} paid (calibrated costs); "
                        "this run cannot tell whether more would.")
    if curve.censored:
        rows.append("The last step may have been cut by the token limit or the end of the answer: it counts "
                    "only for the guesses it kept.")
    data = f'data-k="{curve.k}" data-steps="{curve.steps}"'
    if tau is not None:
        data += f' data-tokens-per-step="{tau:.4f}"'
    if pay is not None and pay.stops_paying_at is not None:
        data += f' data-stops-paying-at="{pay.stops_paying_at}"'
    return (f'<div id="acceptance-curve" class="accept-curve" {data}>{"".join(out)}'
            + "".join(f"<p>{render.esc(r)}</p>" for r in rows) + "</div>")


def charts_html(chunks: Sequence, settings, costs=None) -> str:
    """The histogram of accepted tokens per step and, beside it, the acceptance curve."""
    hist = render.acceptance_histogram_svg(chunks)
    if not hist:
        return ""
    curve = curve_of_chunks(chunks, settings.assistant_tokens)
    pay = payoff(curve, costs) if curve is not None and costs is not None else None
    return f'<div class="after-race">{hist}{curve_html(curve, pay, settings.method)}</div>'


def _token(text: str) -> str:
    """A token's text, with a line break shown as ↵ so a step stays on its line."""
    return render.esc(text.replace("\n", "↵"))


def steps_html(report=None, note: str = "") -> str:
    """The step view (demo.engine.steps.StepReport), or one sentence (`note`) instead."""
    if report is None:
        return f'<div class="steps" data-steps="0">{render.esc(note)}</div>' if note else ""
    t = report.texts
    items = []
    for s in report.steps:
        # The kept guesses are the run's own tokens (exact); only the thrown-away ones are reconstructed.
        kept = min(s.kept, len(s.proposed))
        parts = [f'<span class="tok tok-accepted">{_token(t.get(i, ""))}</span>' for i in s.tokens[:kept]]
        if kept < len(s.proposed):
            parts.append("<del>" + "".join(f'<span class="tok">{_token(t.get(i, ""))}</span>'
                                           for i in s.proposed[kept:]) + "</del>")
        if len(s.tokens) > s.kept:
            parts.append(f'<span class="tok tok-main">{_token(t.get(s.tokens[s.kept], ""))}</span>')
        label = "" if s.matches else ('<span class="differs-label">'
                                      f'{"recorded" if report.recorded else "reconstructed"}; differs from the run</span>')
        if report.recorded:  # the own loop: which drafter guessed, or a plain step
            source = f"from {SOURCE_NAMES[s.source]}" if s.source in SOURCE_NAMES else "no guess"
            label = f'<span class="step-source">{render.esc(source)}</span>' + label
        items.append(f'<li class="{"" if s.matches else "differs"}" data-kept="{s.kept}" '
                     f'data-agreed="{s.agreed}" data-matches="{str(s.matches).lower()}" '
                     f'data-source="{render.esc(s.source or "")}">{"".join(parts)}{label}</li>')
    n, differ = len(report.steps), report.differ
    if report.recorded:
        head = (f"{n} main-model step{'s' if n != 1 else ''} after the first, as the arena's own verify loop ran them: "
                "every guess it verified and where the guess came from (its own record, nothing reconstructed)")
    else:
        head = (f"{n} main-model step{'s' if n != 1 else ''} after the first. The draft's guesses were reconstructed "
                f"after the race by running the draft alone; they match what the run kept on {n - differ} of {n}")
    why = "the record disagrees with the streamed tokens" if report.recorded else "other kernels round differently"
    head += f" ({differ} differ: {why})." if differ else "."
    if not report.complete:
        head += " Stopped before the last step (time limit or Stop): the steps so far."
    legend = ('<span class="tok tok-accepted">kept</span> <del>thrown away</del> '
              '<span class="tok tok-main">the main model\'s own token</span>')
    return (f'<div class="steps" data-steps="{n}" data-differ="{differ}" '
            f'data-complete="{str(report.complete).lower()}"><p>{render.esc(head)}</p><p>{legend}</p>'
            f'<ol>{"".join(items)}</ol></div>')


def build():
    """The "Step by step" section under the race (a gr.HTML with id step-view)."""
    import gradio as gr

    with gr.Accordion("Step by step: every guess, kept and thrown away", open=False):
        return gr.HTML("", elem_id="step-view")


def cleared(components: dict) -> dict:
    return {components["step-view"]: steps_html(note="The step view appears after a finished greedy race.")}


def costs(arena, request):
    from ..engine.steps import step_costs_for

    return step_costs_for(arena, request)


def follow(arena, request, results: dict, view, components: dict, stop: threading.Event,
           superseded: Optional[threading.Event] = None):
    """After a finished race: reconstruct the draft's guesses (in the admission slot, with a
    status line while it waits and works), then show them; Stop ends it at the next step.
    `superseded`: the visitor started another race, which now owns the page: stop at once and
    send nothing more."""
    superseded = superseded or threading.Event()
    from ..engine.steps import for_race, why_not
    from ..engine.waiting import status_stream, with_last_message

    target = components["step-view"]
    spec = results[SPECULATIVE]
    reason = why_not(request.settings, request.options)
    if reason is not None or spec.error or spec.cancelled or len(spec.chunks) < 2:
        view.extra[target] = steps_html(note=reason or "The step view needs a finished run of the speculative side.")
        view.dirty.update(SIDES)  # the race's last update carries everything (API callers read only that one)
        yield view.outputs(components)
        return
    box: list = []
    throttle = Throttle()
    try:
        # Heartbeats while it waits: a closed tab or Stop reaches it in line too.
        work = status_stream(lambda status: for_race(arena, request, spec, stop, status), box)
        for message in with_last_message(work, "rebuilding the draft's guesses"):
            if superseded.is_set():
                return
            if throttle.ready():
                view.status = f"{SPINNER} {message}"
                yield view.outputs(components)
        view.extra[target] = steps_html(box[0])
    except DemoError as e:
        view.extra[target] = steps_html(note=str(e))
    except Exception:  # a bug here must not take the finished race's last update with it
        logging.getLogger(__name__).exception("the step view failed")
        view.extra[target] = steps_html(note="The step view could not be rebuilt for this race; the race itself "
                                             "is unaffected (the terminal says why).")
    finally:
        stop.set()  # Stop, a closed tab or a new race: the reconstruction ends at its next step
    if superseded.is_set():
        return
    view.status = ""
    view.dirty.update(SIDES)
    yield view.outputs(components)
