"""The Scoreboard tab: every finished race on this machine (demo.records.scoreboard), as counts,
medians and the distribution of speedups per configuration (preset, prompt class, method, mode,
K or threshold, greedy or sampled, default length or not), drawn as an SVG (no network, no
plotting library). Export CSV gives the newest rows without prompt text (demo.records.csv_export);
the operator exports everything with `python -m demo.records export-csv`.

It re-renders when the tab is opened and, every few seconds, only if a race was added
since (one cheap query), so a second screen showing it follows the races.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import gradio as gr

from ..engine import three_way
from ..records.scoreboard import DEFAULT_MAX_NEW_TOKENS, VISITOR, ScoreboardError, Standings
from ..core.errors import DemoError
from ..core.settings import METHOD_NAMES
from .files import Downloads
from .render import WARNING, esc
from .style import LOOKUP_COLOUR
from .visitors import VisitorIds, owner_of

POLL_S = 5.0
MAX_DOTS = 80  # per row; a group of thousands of races is drawn as its quantiles
SPEEDUP_COLOUR = "#0072B2"
KEEP_EXPORTS = 4  # CSV files on disk at once (each at most csv_export.PAGE_EXPORT_ROWS rows)
MAX_GROUPS = 40  # configurations drawn (the most raced); the rest are counted in one line
log = logging.getLogger(__name__)


def config_label(g) -> str:
    """"race · K 4 · greedy · 128 tokens": what a group's races had in common besides the prompt."""
    k = f"K {g.assistant_tokens}" if g.assistant_tokens is not None else (
        f"threshold {g.confidence_threshold:g}" if g.confidence_threshold is not None else "K not recorded")
    how = {True: "sampled", False: "greedy", None: "greedy or sampled"}[g.sampling]
    length = f"{DEFAULT_MAX_NEW_TOKENS} tokens" if g.default_length else "other lengths"
    return f"{g.mode} · {k} · {how} · {length}"


def class_label(klass: str, presets) -> str:
    """"example 2: “Repeat this list…”" for an example's id, in words for the others."""
    def short(text: str) -> str:
        text = " ".join(text.split())
        return text if len(text) <= 40 else text[:39] + "…"

    if klass == VISITOR:
        return "visitors' own prompts"
    kind, _, rest = klass.partition(":")
    try:
        if kind == "example":
            name, _, index = rest.rpartition(":")
            return f"example {int(index) + 1}: “{short(presets.presets[name].examples[int(index)])}”"
        if kind == "three-way":
            return f"three-way example {int(rest) + 1}: {three_way.EXAMPLES[int(rest)][0]}"
    except (KeyError, IndexError, ValueError):
        pass
    return klass  # an example that models.yaml no longer has


def plot_svg(groups: list, labels: list, width: int = 1040, sublabels: Optional[list] = None) -> str:
    """One row per group: whiskers min–max, a box from the first to the third quartile, the
    median as a thick tick, up to MAX_DOTS quantiles as dots; a dashed line at 1×."""
    if not groups:
        return ""
    row_h, top, bottom, left, right = 34, 28, 34, 340, 160
    height = top + row_h * len(groups) + bottom
    lo = min(0.8, min(g.speedups[0] for g in groups))
    hi = max(1.5, max(g.speedups[-1] for g in groups))
    pad = (hi - lo) * 0.05
    lo, hi = max(0.0, lo - pad), hi + pad
    sx = lambda v: left + (v - lo) / (hi - lo) * (width - left - right)  # noqa: E731
    out = [f'<svg class="scoreboard-plot" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-label="speedup per preset and prompt class">',
           f'<text x="{left}" y="14" font-size="12" fill="#888">speedup (speculative tok/s ÷ baseline tok/s), '
           f'each dot a race; <tspan fill="{SPEEDUP_COLOUR}">draft model</tspan>, '
           f'<tspan fill="{LOOKUP_COLOUR}">prompt lookup</tspan></text>']
    fits = int((left - 16) / 6.4)  # characters of a 12 px label left of the axis
    for tick in _ticks(lo, hi):
        x = sx(tick)
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - bottom + 4}" stroke="#ccc" '
                   f'stroke-width="0.5"/>')
        out.append(f'<text x="{x:.1f}" y="{height - bottom + 18}" font-size="11" fill="#888" '
                   f'text-anchor="middle">{tick:g}×</text>')
    x1 = sx(1.0)
    out.append(f'<line x1="{x1:.1f}" y1="{top - 6}" x2="{x1:.1f}" y2="{height - bottom + 6}" stroke="#D55E00" '
               f'stroke-dasharray="4 3"/>')
    for i, (g, label) in enumerate(zip(groups, labels)):
        y = top + row_h * i + row_h / 2
        colour = LOOKUP_COLOUR if g.method == "prompt_lookup" else SPEEDUP_COLOUR
        text = label if len(label) <= fits else label[:fits - 1] + "…"
        if sublabels:  # the configuration under the prompt, so a long prompt never hides it
            out.append(f'<text x="{left - 8}" y="{y - 2:.1f}" font-size="12" text-anchor="end" fill="currentColor">'
                       f'{esc(text)}</text><text x="{left - 8}" y="{y + 11:.1f}" font-size="10" text-anchor="end" '
                       f'fill="#888">{esc(sublabels[i])}</text>')
        else:
            out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="12" text-anchor="end" fill="currentColor">'
                       f'{esc(text)}</text>')
        out.append(f'<line x1="{sx(g.speedups[0]):.1f}" y1="{y:.1f}" x2="{sx(g.speedups[-1]):.1f}" y2="{y:.1f}" '
                   f'stroke="{colour}" stroke-width="1"/>')
        q1, q3 = g.quantile(0.25), g.quantile(0.75)
        out.append(f'<rect x="{sx(q1):.1f}" y="{y - 8:.1f}" width="{max(sx(q3) - sx(q1), 1):.1f}" height="16" '
                   f'fill="{colour}" fill-opacity="0.18" stroke="{colour}"/>')
        n = g.count
        picks = g.speedups if n <= MAX_DOTS else [g.quantile(k / (MAX_DOTS - 1)) for k in range(MAX_DOTS)]
        for k, v in enumerate(picks):
            jitter = ((k * 7) % 9 - 4) * 1.2
            out.append(f'<circle cx="{sx(v):.1f}" cy="{y + jitter:.1f}" r="3" fill="{colour}" fill-opacity="0.6"/>')
        m = g.median
        out.append(f'<line class="median" x1="{sx(m):.1f}" y1="{y - 10:.1f}" x2="{sx(m):.1f}" y2="{y + 10:.1f}" '
                   f'stroke="{colour}" stroke-width="3"/>')
        out.append(f'<text x="{width - right + 10}" y="{y + 4:.1f}" font-size="12" fill="currentColor">'
                   f'median {m:.2f}× · {n} race{"s" if n != 1 else ""}</text>')
    out.append("</svg>")
    return "".join(out)


def _ticks(lo: float, hi: float) -> list:
    span = hi - lo
    step = 0.25 if span <= 2 else 0.5 if span <= 4 else 1.0 if span <= 8 else 2.0
    first = (int(lo / step) + 1) * step
    out, t = [], first
    while t < hi and len(out) < 20:
        out.append(round(t, 2))
        t += step
    return out


def board_html(standings: Standings, presets) -> str:
    """The table and plot, of the MAX_GROUPS configurations with the most races: visitors' settings
    (K, threshold, length, sampling, mode) make thousands of groups, and megabytes of HTML."""
    groups = standings.groups
    hidden = []
    if len(groups) > MAX_GROUPS:
        shown = set(map(id, sorted(groups, key=lambda g: -g.count)[:MAX_GROUPS]))
        hidden = [g for g in groups if id(g) not in shown]
        groups = [g for g in groups if id(g) in shown]
    one_preset = len({g.preset for g in groups}) == 1
    labels = [("" if one_preset else f"{g.preset} · ") + f"{class_label(g.prompt_class, presets)} · "
              f"{METHOD_NAMES.get(g.method, g.method)}" for g in groups]
    configs = [config_label(g) for g in groups]
    total = standings.total
    head = (f'<p class="scoreboard-total" data-total="{total}"><b>{total}</b> finished race'
            f'{"s" if total != 1 else ""} on the scoreboard'
            + (f"{f' with {esc(groups[0].preset)}' if groups and one_preset else ''} (a three-way race counts "
               "twice: draft model and prompt lookup)." if total else ": run a race and it appears here.") + "</p>")
    if not groups:
        return f'<div class="scoreboard">{head}</div>'
    rows = ["<table class='scoreboard-table'><tr><th>preset</th><th>prompt</th><th>method</th><th>settings</th>"
            "<th>races</th><th>median speedup</th><th>middle half</th><th>range</th></tr>"]
    for g, label in zip(groups, labels):
        rows.append(
            f"<tr data-preset='{esc(g.preset)}' data-class='{esc(g.prompt_class)}' data-method='{esc(g.method)}' "
            f"data-config='{esc(config_label(g))}' data-count='{g.count}' data-median='{g.median:.4f}'>"
            f"<td>{esc(g.preset)}</td><td>{esc(class_label(g.prompt_class, presets))}</td>"
            f"<td>{esc(METHOD_NAMES.get(g.method, g.method))}</td><td>{esc(config_label(g))}</td><td>{g.count}</td>"
            f"<td>{g.median:.2f}×</td>"
            f"<td>{g.quantile(0.25):.2f}–{g.quantile(0.75):.2f}×</td>"
            f"<td>{g.speedups[0]:.2f}–{g.speedups[-1]:.2f}×</td></tr>")
    rows.append("</table>")
    if hidden:
        races = sum(g.count for g in hidden)
        rows.append(f'<p class="scoreboard-more" data-hidden="{len(hidden)}">{len(hidden):,} more configurations '
                    f'({races:,} races) are not shown; Export CSV has every race.</p>')
    return f'<div class="scoreboard">{head}{plot_svg(groups, labels, sublabels=configs)}{"".join(rows)}</div>'


def build(arena, booth, tab, door=None) -> None:
    ids = door.ids if door is not None else VisitorIds()
    gr.Markdown(
        "Every race that finished on this page (both sides done, not stopped), kept across restarts: "
        "how much faster speculative decoding was, per model pair, prompt, method and settings (races "
        "are compared only with races run the same way). Built-in examples are counted one by one; "
        "visitors' own prompts together"
        + (" (their text is kept for the operator, never exported here)." if booth.keep_prompts
           else " (their text is not kept).")
    )
    board = gr.HTML("", elem_id="scoreboard")
    seen = gr.State(-1)  # the newest row this page has drawn
    with gr.Row():
        export = gr.Button("Export CSV", elem_id="scoreboard-export", scale=0, min_width=160)
        csv_file = gr.File(label="Scoreboard (CSV)", elem_id="scoreboard-csv", interactive=False, visible=False)
    ticker = gr.Timer(POLL_S)
    exports = Downloads("scoreboard", keep=KEEP_EXPORTS)

    def render(drawn: Optional[int] = None):
        try:
            standings = booth.board(arena).standings()
        except ScoreboardError as e:
            return f'<div class="scoreboard"><p class="problem">{WARNING} {esc(e)}</p></div>', -1
        if drawn is not None and drawn == standings.newest_id:
            return gr.skip(), gr.skip()
        return board_html(standings, arena.presets), standings.newest_id

    def poll(drawn):
        if not isinstance(drawn, int):
            drawn = -1
        return render(drawn)

    def export_csv(http: gr.Request):
        try:
            out = exports.new_folder(owner_of(ids.keys(http))) / f"scoreboard-{time.strftime('%Y%m%d-%H%M%S')}.csv"
            booth.board(arena).export_csv(out)
        except (ScoreboardError, DemoError) as e:
            raise gr.Error(str(e), print_exception=False)
        except OSError as e:  # a full disk: the path and errno go to the log, the visitor gets a sentence
            log.warning("scoreboard export failed: %s", e)
            raise gr.Error("The scoreboard could not be exported just now; try again later.", print_exception=False)
        return gr.File(value=str(out), visible=True)

    # Selecting the tab again sends nothing when no race was added since this page drew the board.
    tab.select(poll, seen, [board, seen], api_visibility="private", queue=False)
    ticker.tick(poll, seen, [board, seen], api_visibility="private", queue=False)
    export.click(export_csv, None, csv_file, api_visibility="private", concurrency_limit=1,
                 concurrency_id="scoreboard-export")
