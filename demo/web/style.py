"""CSS for the booth features; app.launch passes it with demo.web.render.CSS.

Kiosk rules apply only under `.kiosk-mode`, a class the kiosk script puts on <html>: a
projector two metres away needs about twice the normal type, no footer and the full width.
They are all !important: Gradio repeats the page CSS under a more specific prefix
(`.gradio-container… .contain`), which would otherwise win over a class on <html>.
"""

from .render import ACCEPTED_COLOUR, BASELINE_COLOUR, SPECULATIVE_COLOUR
from .startup_view import CSS as STARTUP_CSS

LOOKUP_COLOUR = "#009E73"  # Okabe–Ito green: the prompt-lookup lane

# The step view (demo.web.step_view): kept guesses blue, thrown-away ones struck through.
REJECTED_COLOUR = "#D55E00"  # Okabe–Ito vermilion: a guess the main model threw away

STEP_VIEW_CSS = f"""
.after-race {{ display: flex; flex-wrap: wrap; align-items: flex-start; gap: 12px; }}
.accept-curve {{ font-size: 13px; max-width: 340px; }}
.accept-curve svg {{ max-width: 100%; height: auto; }}
.accept-curve p {{ margin: 2px 0; }}
.steps {{ font-size: 13px; }}
.steps ol {{ padding-left: 2.6em; margin: 4px 0; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }}
.steps li {{ margin: 2px 0; white-space: pre-wrap; }}
.steps .tok {{ padding: 0 1px; margin-right: 2px; border-radius: 2px; }}
.steps del {{ color: {REJECTED_COLOUR}; text-decoration-thickness: 2px; }}
.steps .differs {{ background: #F0E44240; }}
.steps .differs-label {{ color: #8a6d00; font-family: sans-serif; font-size: 12px; margin-left: 6px; }}
.steps .step-source {{ color: #555; font-family: sans-serif; font-size: 12px; margin-left: 6px; }}
"""

CSS = f"""
.lane-title h3 {{ margin: 0 0 4px 0; }}
.recorded-label {{ font-size: 15px; padding: 6px 10px; border-radius: 6px; border: 1px dashed #888; }}
.recorded-label .prompt {{ white-space: pre-wrap; color: var(--body-text-color-subdued); }}
.summary.three-way .winner {{ font-size: 24px; font-weight: 700; color: {SPECULATIVE_COLOUR}; }}
.lanes-table, .scoreboard-table {{ border-collapse: collapse; margin: 6px 0; font-size: 14px; }}
.lanes-table td, .lanes-table th, .scoreboard-table td, .scoreboard-table th {{
  padding: 2px 10px; border-bottom: 1px solid var(--border-color-primary); text-align: left; }}
.lanes-table tr.won td {{ font-weight: 700; }}
.scoreboard-plot {{ max-width: 100%; height: auto; }}
.scoreboard-total {{ font-size: 16px; }}
.scoreboard .problem, .replay-problem {{ color: #D55E00; }}
.chat-pane {{ max-height: 40em; overflow-y: auto; }}
.chat-pane .panel-text {{ min-height: 2em; max-height: none; }}
.chat-turn {{ margin-bottom: 10px; }}
.chat-user {{ padding: 4px 8px; margin-bottom: 4px; border-radius: 6px; background: var(--background-fill-secondary); white-space: pre-wrap; }}
.chat-note {{ color: var(--body-text-color-subdued); font-size: 13px; }}

.kiosk-mode footer {{ display: none !important; }}
.kiosk-mode .gradio-container {{ max-width: 100% !important; padding: 8px 24px !important; }}
.kiosk-mode body, .kiosk-mode .gradio-container {{ font-size: 22px !important; }}
.kiosk-mode h1 {{ font-size: 44px !important; }}
.kiosk-mode h3 {{ font-size: 30px !important; }}
.kiosk-mode #prompt textarea {{ font-size: 28px !important; line-height: 1.3 !important; }}
.kiosk-mode #run, .kiosk-mode #stop {{ font-size: 28px !important; min-height: 64px !important; }}
.kiosk-mode .panel-text {{ font-size: 28px !important; line-height: 1.35 !important; min-height: 9em !important; max-height: 14em !important; }}
.kiosk-mode .stats {{ font-size: 22px !important; }}
.kiosk-mode .stat b {{ font-size: 34px !important; }}
.kiosk-mode .summary {{ font-size: 26px !important; }}
.kiosk-mode .summary .big {{ font-size: 56px !important; }}
.kiosk-mode .legend {{ font-size: 22px !important; }}
.kiosk-mode #examples button {{ font-size: 22px !important; }}
.kiosk-mode #status, .kiosk-mode #startup {{ font-size: 24px !important; }}
.kiosk-mode .race-chart {{ width: 100% !important; }}
""" + STEP_VIEW_CSS + STARTUP_CSS

LANE_COLOURS = {"baseline": BASELINE_COLOUR, "speculative": SPECULATIVE_COLOUR, "draft": SPECULATIVE_COLOUR,
                "lookup": LOOKUP_COLOUR, "accepted": ACCEPTED_COLOUR}
