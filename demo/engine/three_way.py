"""The three-way race: baseline, draft-model speculation and prompt-lookup speculation on
the same prompt, each alone with the whole machine, one after the other (like fair mode),
then replayed side by side at the pace each really had.

Which speculative method wins depends on the prompt: a draft model guesses well on
free-running text; prompt lookup copies n-grams of the prompt, so it wins when the answer
repeats the prompt (editing code, reformatting a list). EXAMPLES shows both.

    for event in run(arena, RaceRequest(prompt="…")):
        ...  # StatusEvent / StartEvent / ChunkEvent / DoneEvent, with side = lane name
    summary = summarize(results, how)

Engine code: no Gradio. The pipelines come through the Arena (its prepared models, its
pipeline cache and its one admission slot), like Arena.run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Iterator, Optional, Sequence

from ..core import placement
from ..core.errors import DemoError
from ..core.metrics import SideStats, acceptance_rate, compare, side_stats
from ..core.settings import PipelineOptions, cpu_cores
from ..core.streaming import BASELINE, HEARTBEAT_S, SPECULATIVE, StatusEvent
from .admission import holding
from .arena import RaceRequest, validate_prompt
from .backend import Backend
from .race import one_by_one

LANES = ("baseline", "draft", "lookup")
METHOD = {"draft": "draft", "lookup": "prompt_lookup"}
TITLES = {"baseline": "Baseline", "draft": "Draft model", "lookup": "Prompt lookup"}

# (what it shows, prompt). The first two copy much of the prompt into the answer (prompt
# lookup's case); the last two write new text (the draft model's case).
EXAMPLES = [
    ("code edit: copies the prompt, favours prompt lookup",
     "Rename the variable `total` to `running_sum` in this function and return the whole function:\n\n"
     "def average(values):\n    total = 0\n    for v in values:\n        total += v\n"
     "    if not values:\n        return 0\n    return total / len(values)\n"),
    ("reformatting: copies the prompt, favours prompt lookup",
     "Repeat this list in upper case: apple, banana, cherry, date, elderberry, fig, grape, honeydew, kiwi, lemon."),
    ("new code: nothing to copy, favours the draft model",
     "Write a Python function that checks whether a string is a palindrome."),
    ("free text: nothing to copy, favours the draft model",
     "Explain in three sentences why the sky is blue."),
]
EXAMPLE_PROMPTS = [prompt for _, prompt in EXAMPLES]


@dataclass(frozen=True)
class ThreeWaySummary:
    stats: dict                        # lane -> SideStats
    speedups: dict                     # draft / lookup -> tok/s ÷ the baseline's (None if unknown)
    acceptance: dict                   # draft / lookup -> OpenVINO's accepted ÷ drafted
    verdicts: dict                     # draft / lookup -> equality with the baseline's tokens
    winner: Optional[str]              # the lane with the most tok/s (None if nothing finished)
    runner_up: Optional[str]
    margin: Optional[float]            # the winner's tok/s ÷ the runner-up's
    sentence: str                      # who won and by how much, in words
    how: str
    errors: dict


def summarize(results: dict, how: str = "") -> ThreeWaySummary:
    """Who won: the lane with the highest tok/s (wall clock, prefill included, as everywhere)."""
    stats: dict[str, SideStats] = {}
    for lane in LANES:
        r = results.get(lane)
        if r is not None:
            stats[lane] = side_stats(r.chunks, r.start, r.end)
    errors = {lane: r.error for lane, r in results.items() if r.error}
    ranked = sorted((lane for lane in stats if lane not in errors and stats[lane].tokens_per_s > 0),
                    key=lambda lane: stats[lane].tokens_per_s, reverse=True)
    speedups, acceptance, verdicts = {}, {}, {}
    for lane in ("draft", "lookup"):
        r, base = results.get(lane), results.get("baseline")
        c = compare(base, r) if r is not None and base is not None else None
        speedups[lane] = c.speedup if c is not None else None
        acceptance[lane] = acceptance_rate(r.ov_accepted_tokens, r.ov_draft_tokens) if r is not None else None
        verdicts[lane] = c.verdict if c is not None else "not run"
    winner = ranked[0] if ranked else None
    runner_up = ranked[1] if len(ranked) > 1 else None
    margin = stats[winner].tokens_per_s / stats[runner_up].tokens_per_s if winner and runner_up else None
    return ThreeWaySummary(stats=stats, speedups=speedups, acceptance=acceptance, verdicts=verdicts,
                           winner=winner, runner_up=runner_up, margin=margin,
                           sentence=_sentence(winner, runner_up, margin, speedups), how=how, errors=errors)


def _sentence(winner, runner_up, margin, speedups) -> str:
    if winner is None:
        return "No lane finished, so there is no winner."
    if runner_up is None:
        return f"{TITLES[winner]} was the only lane that finished."
    if winner == "baseline":
        tried = ", ".join(f"{TITLES[l].lower()} {speedups[l]:.2f}×" for l in ("draft", "lookup")
                          if speedups.get(l) is not None)
        return ("The baseline won: speculation did not pay off on this prompt"
                + (f" ({tried} the baseline's speed)." if tried else "."))
    line = f"{TITLES[winner]} won: {speedups[winner]:.2f}× the baseline's speed" if speedups.get(winner) else \
        f"{TITLES[winner]} won"
    other = "lookup" if winner == "draft" else "draft"
    if speedups.get(other):  # and against the other method
        line += f", {speedups[winner] / speedups[other]:.2f}× the {TITLES[other].lower()}'s"
    return line + "."


def how_it_ran(request: RaceRequest, options: Optional[PipelineOptions] = None) -> str:
    """`options`: what _run built the lanes with (Backend.options_for), else the request's."""
    cores = cpu_cores()
    k = request.settings.assistant_tokens
    exact = placement.describe_built_with((options or request.options).with_threads(None), "draft")
    return (f"three-way: each lane alone with all {cores} core{'s' if cores != 1 else ''}, one after the other, "
            f"then replayed side by side; main on {request.options.main_device}, draft on "
            f"{request.options.draft_device}; {k} assistant tokens for both methods; {exact}")


def run(arena: Backend, request: RaceRequest, stop: Optional[threading.Event] = None,
        visitor: Sequence[str] = (), heartbeats: bool = False) -> Iterator:
    """Wait for the CPU (StatusEvents meanwhile), prepare the preset, then run the baseline,
    the draft model and prompt lookup alone, one after the other, all inside one admission
    slot; `visitor`: whose job it is (Admission.claim). Closing the iterator stops the work
    without waiting for it; `heartbeats` as in Arena.run (a Stop reaches a lane that loads)."""
    with arena.admission.visiting("a three-way race", visitor):
        yield from _run(arena, request, stop, HEARTBEAT_S if heartbeats else None)


def _run(arena: Backend, request: RaceRequest, stop: Optional[threading.Event], beat: Optional[float]) -> Iterator:
    prompt = validate_prompt(request.prompt)
    settings = request.settings.validated()
    if settings.assistant_tokens is None:
        raise DemoError("The three-way race needs a number of assistant tokens (prompt lookup has no confidence "
                        "threshold); set one and run again.")
    preset = arena.presets.get(request.preset)
    if preset.draft is None:
        raise DemoError(f"The preset {preset.name!r} has no draft model, so it cannot race a draft against prompt "
                        "lookup; choose a preset with a draft model.")
    stop = stop or threading.Event()
    draft_method = preset.default_method  # the draft lane: a draft model or an EAGLE-3 head (the draft exists)
    lane_settings = {"baseline": replace(settings, method=draft_method), "draft": replace(settings, method=draft_method),
                     "lookup": replace(settings, method="prompt_lookup")}
    chosen: dict = {}

    def pipelines(pair, method: str, status):
        draft = pair.draft if method != "prompt_lookup" else None
        return arena.cache.get(pair.main, draft, method, chosen["options"], status)

    def check_prompt(status, pair):
        # Each lane alone: OpenVINO's default threads, every core, once the guard proved it on
        # this CPU (else the next proven count, as a race does); never a recorded crash.
        drafting = replace(request, settings=lane_settings["draft"])
        threads = arena.threads_to_use(drafting, pair, status, cancel=stop, wanted=None)
        chosen["options"] = arena.options_for(request).with_threads(threads)
        runners = pipelines(pair, draft_method, status)
        for lane, runner in ((BASELINE, runners[BASELINE]), (SPECULATIVE, runners[SPECULATIVE])):
            check = getattr(runner, "check_prompt", None)
            if check is not None:  # a too-long prompt: one refusal, before any lane starts
                check(prompt, lane_settings["draft"])
        return pair

    ticket, pair = yield from arena.admitted(
        "a three-way race", stop,
        lambda status: arena.prepare(request.preset, status, cancel=stop, main_format=request.main_format,
                                     draft_format=request.draft_format),
        check_prompt)

    def lane_runner(lane: str):
        if lane == "lookup":  # its speculative side alone: the baseline lane's main is the draft pair's
            key = arena.cache.key(pair.main, None, "prompt_lookup", chosen["options"])
            return lambda status: arena.cache.get_side(key, SPECULATIVE, status)
        side = BASELINE if lane == "baseline" else SPECULATIVE
        return lambda status: pipelines(pair, draft_method, status)[side]

    lanes = [(lane, lane_runner(lane), lane_settings[lane]) for lane in LANES]
    yield from holding(ticket, lambda: one_by_one(lanes, prompt, stop, on_finished=ticket.release,
                                                  on_status=lambda m: StatusEvent(f"three-way: {m}"),
                                                  heartbeat_s=beat))
