"""HTML for the page: panels, stats, summary, chart. Pure functions, no Gradio, no OpenVINO.

Model output is untrusted: every piece of it goes through html.escape, so `<script>` or
`<img onerror=…>` in an answer shows up as text and never runs.
"""

from __future__ import annotations

import html
from typing import Optional, Sequence

from ..core.metrics import DEFINITIONS, SideStats
from ..core.streaming import Chunk

# Colours from Okabe–Ito, readable for colour-blind visitors.
ACCEPTED_COLOUR = "#56B4E9"  # tokens the draft guessed and the main model accepted
MAIN_COLOUR = "#E69F00"      # the token the main model produced itself in that step
BASELINE_COLOUR = "#999999"
SPECULATIVE_COLOUR = "#0072B2"


# The page's icons, drawn without a font (every tab uses them).
# Busy: a ring that turns (CSS, so no font is involved).
SPINNER = '<span class="spinner" aria-hidden="true"></span>'
# Something is wrong or was skipped: a triangle drawn in SVG, the "!" in it from the page's own font.
WARNING = ('<svg class="icon-warning" viewBox="0 0 16 16" width="16" height="16" aria-hidden="true">'
           '<path d="M8 1 L15 14 L1 14 Z" fill="#E69F00"/><rect x="7.2" y="5" width="1.6" height="5" fill="#000"/>'
           '<rect x="7.2" y="11" width="1.6" height="1.6" fill="#000"/></svg>')
STOP = '<span class="icon-stop" aria-hidden="true"></span>'
PLAY = '<span class="icon-play" aria-hidden="true"></span>'


def esc(value) -> str:
    """Model output and anything else from outside, safe inside HTML text and attributes."""
    return html.escape(str(value), quote=True)


# A panel's HTML is left open at its end (the browser closes the tags): as text streams in,
# each update only appends to the last one, and Gradio then sends just the new tail.
PANEL_OPEN = '<div class="panel-text">'


def placeholder_html(placeholder: str) -> str:
    return f'{PANEL_OPEN}<span class="placeholder">{esc(placeholder)}</span>'


def baseline_piece(chunk: Chunk) -> str:
    """One step of the baseline's panel (escaping is per character, so pieces concatenate)."""
    return esc(chunk.text)


def step_html(i: int, c: Chunk) -> str:
    """Step i of a speculative panel: its accepted guesses, then the main model's token."""
    rest = c.text[len(c.accepted_text):] if c.text.startswith(c.accepted_text) else c.text
    acc = c.accepted_text if c.text.startswith(c.accepted_text) else ""
    inner = ""
    if c.accepted:
        inner += f'<span class="tok-accepted" data-n="{c.accepted}">{esc(acc)}</span>'
    inner += f'<span class="tok-main">{esc(rest)}</span>'
    return f'<span class="step" title="step {i + 1}: {c.accepted} accepted + 1 from the main model">{inner}</span>'


def baseline_html(chunks: Sequence[Chunk], placeholder: str = "") -> str:
    body = "".join(baseline_piece(c) for c in chunks)
    return PANEL_OPEN + body if body else placeholder_html(placeholder)


def speculative_html(chunks: Sequence[Chunk], placeholder: str = "") -> str:
    """One <span class=step> per main-model step: accepted guesses, then the main token."""
    if not chunks:
        return placeholder_html(placeholder)
    return PANEL_OPEN + "".join(step_html(i, c) for i, c in enumerate(chunks))


def stats_html(stats: Optional[SideStats], note: str = "", state: str = "idle") -> str:
    """`state` (idle, running, done) is exposed as data-state for tests and embedders."""
    if stats is None or stats.tokens == 0:
        return f'<div class="stats" data-state="{state}">{esc(note) or "&nbsp;"}</div>'
    cells = [
        ("tokens", f"{stats.tokens}"),
        ("elapsed", f"{stats.elapsed_s:.1f} s"),
        ("tok/s", f"{stats.tokens_per_s:.1f}"),
        ("TTFT", f"{stats.ttft_s * 1000:.0f} ms" if stats.ttft_s is not None else "–"),
    ]
    # Each label names what it counts (demo.core.metrics.DEFINITIONS) on hover.
    body = "".join(f'<span class="stat"{_title(k)}><b>{v}</b> {k}</span>' for k, v in cells)
    if note:
        body += f'<span class="stat note">{esc(note)}</span>'
    return (f'<div class="stats" data-state="{state}" data-tokens="{stats.tokens}" '
            f'data-tokens-per-s="{stats.tokens_per_s:.4f}">{body}</div>')


def _title(label: str) -> str:
    return f' title="{esc(DEFINITIONS[label])}"' if label in DEFINITIONS else ""


def summary_html(summary) -> str:
    """The verdict after both sides finished (demo.engine.arena.Summary): one line a booth
    visitor takes in at a glance (the speedup, the two rates, whether the texts match), the
    counts under it, and how it was measured (definitions, OpenVINO's properties) behind a fold."""
    glance = f'<span class="verdict">outputs {esc(summary.verdict)}</span>'
    if summary.speedup is not None:
        glance = (f'<span class="big">{summary.speedup:.2f}×</span> speedup '
                  f'({summary.speculative.tokens_per_s:.1f} vs {summary.baseline.tokens_per_s:.1f} tok/s), ' + glance)
    rows = [glance]
    if getattr(summary, "weights", None):  # the two sides read different main weights
        rows.append(f'<span class="weights">{esc(summary.weights)}</span>')
    if getattr(summary, "baseline_note", None):  # the baseline is not this machine's fastest alone
        rows.append(f'<span class="baseline-note">{esc(summary.baseline_note)}</span>')
    s = summary.speculative
    if s.steps:
        rows.append(f"{s.accepted} guesses accepted in {s.steps} verify steps; {s.tokens_per_step:.2f} tokens per "
                    "verify step (each step's own token from the main model included, the prompt's step left out)")
    if summary.acceptance_rate is not None:
        counts = (f"{summary.ov_accepted} of {summary.ov_drafted} guesses; "
                  if summary.ov_accepted is not None and summary.ov_drafted is not None else "")
        counted_by = getattr(summary, "counted_by", "OpenVINO's count, which leaves out the last step")
        rows.append(f"acceptance rate {summary.acceptance_rate * 100:.0f}% ({counts}{counted_by})")  # the code's words
    if getattr(summary, "sources", None):
        rows.append(f'<span class="sources">{esc(summary.sources)}</span>')
    for side, err in summary.errors.items():
        rows.append(f'<span class="error">{esc(side)} failed: {esc(err)}</span>')
    measured = (f'<details class="how-measured"><summary>How this was measured</summary><span class="how">'
                f'tok/s: {esc(DEFINITIONS["tok/s"])}; TTFT: {esc(DEFINITIONS["TTFT"])}.</span><br>'
                f'<span class="how">{esc(summary.how)}</span></details>')
    return (f'<div class="summary" data-accepted="{s.accepted}" data-verdict="{esc(summary.verdict)}">'
            + "<br>".join(rows) + measured + "</div>")


def race_chart_svg(series: dict, width: int = 640, height: int = 180, colours: Optional[dict] = None) -> str:
    """Tokens generated over time, one line per side: the lines separate as the race goes.

    `series` maps side (or lane) name -> list of (seconds since start, cumulative tokens);
    `colours` maps names to colours for lanes other than baseline and speculative.
    """
    colours = {"baseline": BASELINE_COLOUR, "speculative": SPECULATIVE_COLOUR, **(colours or {})}
    series = {side: _thinned(pts) for side, pts in series.items()}
    points = [p for s in series.values() for p in s]
    if not points:
        return '<div class="chart empty">the race chart appears when tokens flow</div>'
    pad_l, pad_b, pad_t, pad_r = 40, 24, 10, 110
    max_t = max(p[0] for p in points) or 1.0
    max_n = max(p[1] for p in points) or 1
    sx = lambda t: pad_l + t / max_t * (width - pad_l - pad_r)
    sy = lambda n: height - pad_b - n / max_n * (height - pad_b - pad_t)
    out = [f'<svg class="race-chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="tokens over time">',
           f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" stroke="#888"/>',
           f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" stroke="#888"/>',
           f'<text x="{pad_l}" y="{height - 6}" font-size="11" fill="#888">0 s</text>',
           f'<text x="{width - pad_r}" y="{height - 6}" font-size="11" fill="#888" text-anchor="end">{max_t:.1f} s</text>',
           f'<text x="{pad_l - 4}" y="{pad_t + 8}" font-size="11" fill="#888" text-anchor="end">{max_n}</text>']
    for side, pts in series.items():
        if not pts:
            continue
        path = " ".join(f"{sx(t):.1f},{sy(n):.1f}" for t, n in [(0.0, 0)] + list(pts))
        colour = colours.get(side, "#333")
        out.append(f'<polyline class="line-{esc(side)}" fill="none" stroke="{colour}" stroke-width="2.5" points="{path}"/>')
        t, n = pts[-1]
        # End labels: speculative above its line end, baseline below, so they never overlap
        # (a third lane, prompt lookup in the three-way race, above both).
        dy = {"speculative": -6, "draft": -6, "lookup": -20}.get(side, 14)
        y = max(sy(n) + dy, 12.0)  # a label above the top line stays inside the chart
        out.append(f'<text x="{sx(t) + 6:.1f}" y="{y:.1f}" font-size="12" fill="{colour}">{esc(side)} {n}</text>')
    out.append("</svg>")
    return "".join(out)


# A line of 2,048 steps is sent ~10 times a second while it grows; 640 pixels show no more
# than a few hundred points, so the chart's size stays the same however long the race.
MAX_CHART_POINTS = 240


def _thinned(pts: Sequence) -> list:
    """At most MAX_CHART_POINTS of a line, evenly spaced, always with its last point."""
    pts = list(pts)
    if len(pts) <= MAX_CHART_POINTS:
        return pts
    step = (len(pts) - 1) / (MAX_CHART_POINTS - 1)
    return [pts[round(i * step)] for i in range(MAX_CHART_POINTS)]


def acceptance_histogram_svg(chunks: Sequence[Chunk], width: int = 320, height: int = 140) -> str:
    """How many draft tokens each main-model step accepted (steps after the first)."""
    counts: dict[int, int] = {}
    for c in chunks[1:]:
        counts[c.accepted] = counts.get(c.accepted, 0) + 1
    if not counts:
        return ""
    max_k = max(counts)
    top = max(counts.values())
    bar_w = (width - 40) / (max_k + 1)
    out = [f'<svg class="accept-hist" viewBox="0 0 {width} {height}" width="{width}" role="img" '
           f'aria-label="accepted tokens per step">']
    for k in range(max_k + 1):
        n = counts.get(k, 0)
        h = n / top * (height - 40)
        x = 30 + k * bar_w
        out.append(f'<rect x="{x + 2:.1f}" y="{height - 20 - h:.1f}" width="{bar_w - 4:.1f}" height="{h:.1f}" fill="{ACCEPTED_COLOUR}"/>')
        out.append(f'<text x="{x + bar_w / 2:.1f}" y="{height - 6}" font-size="11" text-anchor="middle" fill="#888">{k}</text>')
        if n:
            out.append(f'<text x="{x + bar_w / 2:.1f}" y="{height - 24 - h:.1f}" font-size="11" text-anchor="middle" fill="#888">{n}</text>')
    out.append(f'<text x="{width / 2}" y="12" font-size="11" text-anchor="middle" fill="#888">accepted draft tokens per step</text></svg>')
    return "".join(out)


CSS = f"""
.panel-text {{ white-space: pre-wrap; font-family: ui-monospace, SFMono-Regular, Menlo, monospace;
  font-size: 14px; min-height: 16em; max-height: 28em; overflow-y: auto; padding: 8px;
  border: 1px solid var(--border-color-primary); border-radius: 6px; }}
.placeholder {{ color: var(--body-text-color-subdued); font-style: italic; }}
.tok-accepted {{ background: {ACCEPTED_COLOUR}40; border-bottom: 2px solid {ACCEPTED_COLOUR}; }}
.tok-main {{ background: {MAIN_COLOUR}40; border-bottom: 2px solid {MAIN_COLOUR}; }}
.show-steps .step {{ outline: 1px dashed #888; margin-right: 1px; }}
.legend span {{ padding: 0 4px; margin-right: 8px; }}
.stats {{ display: flex; gap: 14px; flex-wrap: wrap; font-size: 14px; min-height: 1.6em; }}
.stat b {{ font-size: 18px; }}
.stat.note {{ color: var(--body-text-color-subdued); }}
.summary {{ font-size: 15px; line-height: 1.7; }}
.why {{ font-size: 14px; margin-top: 6px; }}
.why summary {{ font-weight: 600; cursor: pointer; }}
.why-regime {{ font-size: 15px; }}
.why-bar {{ display: flex; height: 14px; border-radius: 4px; overflow: hidden; max-width: 640px; }}
.why-part {{ display: block; height: 100%; }}
.summary .big {{ font-size: 28px; font-weight: 700; color: {SPECULATIVE_COLOUR}; }}
.summary .how {{ color: var(--body-text-color-subdued); font-size: 13px; }}
.summary .error {{ color: #D55E00; }}
.race-chart {{ max-width: 100%; height: auto; }}
.accept-hist {{ max-width: 100%; height: auto; margin-left: 24px; }}
.chart.empty {{ color: var(--body-text-color-subdued); font-size: 13px; }}
"""

LEGEND_HTML = (
    '<div class="legend">'
    '<span class="tok-accepted">guessed by the draft, accepted</span>'
    '<span class="tok-main">produced by the main model itself</span>'
    "</div>"
)


def why_html(why) -> str:
    """"Why this speedup?" (demo.core.explain.Explanation): where the speculative side's time went,
    what one verify step cost here, and the sentence that says which regime this machine is in."""
    if why is None:
        return ""
    rows = [f'<p class="why-regime">{esc(why.regime)}</p>']
    parts = [("drafting", why.draft_s, ACCEPTED_COLOUR), ("verifying", why.verify_s, MAIN_COLOUR),
             ("other", why.other_s, BASELINE_COLOUR)]
    total = sum(v for _, v, _ in parts if v) or 0.0
    if total > 0:
        bar = "".join(
            f'<span class="why-part" data-part="{name}" data-seconds="{v:.4f}" title="{name}: {v:.2f} s" '
            f'style="width:{100 * v / total:.1f}%;background:{colour}"></span>'
            for name, v, colour in parts if v)
        legend = ", ".join(f"{name} {v:.2f} s" for name, v, _ in parts if v is not None)
        rows.append(f'<div class="why-bar">{bar}</div><p>Speculative side, whole run: {legend}.</p>')
    # (cost_ratio is None when a timer read 0 ms, e.g. prompt lookup's verify time in race mode)
    if why.verify_step_ms is not None and why.base_token_ms is not None and why.cost_ratio is not None:
        rows.append(f"One verify step ({esc(why.guesses)}) took {why.verify_step_ms:.0f} ms; "
                    f"one plain step of the main model {why.base_token_ms:.0f} ms "
                    f"(ratio {why.cost_ratio:.2f}×; means over the steps after the prompt's, {esc(why.timer)}).")
    if why.measured_speedup is not None:
        line = f"Measured speedup {why.measured_speedup:.2f}×"
        if why.predicted_speedup is not None:
            line += f"; calibration predicted {why.predicted_speedup:.2f}×"
        rows.append(line + ".")
    if why.formats:
        rows.append(f"Weights: {esc(why.formats)}.")
    if why.fastest_alone:
        rows.append(f"Fastest configuration without a draft: {esc(why.fastest_alone)}.")  # it says where measured
    if why.reference:
        rows.append(f"Reference: {esc(why.reference)}.")
    if why.under_load:  # throughput with many visitors, not this race's speedup
        rows.append(f'<p class="why-load">{esc(why.under_load)}</p>')
    ratio = f' data-cost-ratio="{why.cost_ratio:.4f}"' if why.cost_ratio is not None else ""
    return (f'<details class="why" open{ratio}><summary>Why this speedup?</summary>'
            + "".join(r if r.startswith("<") else f"<p>{r}</p>" for r in rows) + "</details>")
