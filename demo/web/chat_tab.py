"""The Chat tab: a conversation raced turn by turn (demo.engine.chat).

Two panes, baseline and speculative, stream each turn side by side with the race's live
counters; each pane shows its own history of the same user turns. Under them, every turn's
tok/s and speedup and the conversation's so far. A turn goes through the engine's front
door like a race: the same queue, admission slot, Stop and checks.
"""

from __future__ import annotations

import html
import threading

import gradio as gr

from ..core.errors import DemoError
from ..core.settings import GenerationSettings, PipelineOptions
from ..core.streaming import BASELINE, SIDES, DoneEvent, Heartbeat, StartEvent, StatusEvent
from ..engine import chat
from ..engine.arena import RaceRequest
from . import checks, render
from .lanes import TITLES, Throttle
from .render import SPINNER, STOP
from .prompt_row import prompt_row
from .race_tab import METHODS, method_label

MAX_ASSISTANT_TOKENS = 16
STOPPED = (f"{STOP} Stopped. What each side wrote so far stays in its own history; send the next message, or press "
           "New chat.")


def method_of(arena, preset: str) -> str:
    return arena.presets.get(preset).default_method


def parse_inputs(arena, message, preset, max_new_tokens, assistant_tokens, method) -> RaceRequest:
    """Every raw value checked on the server, as the race's (an API caller can send anything).
    `method`: the radio's label, as the race's (race_tab.METHODS)."""
    message = checks.prompt(message)
    name = checks.choice("model pair", preset, list(arena.presets.presets))
    reason = arena.needs_operator(name)
    if reason:
        raise DemoError(reason)
    settings = GenerationSettings(
        max_new_tokens=checks.number("max new tokens", max_new_tokens, 1, chat.MAX_NEW_TOKENS, integer=True),
        assistant_tokens=checks.number("assistant tokens", assistant_tokens, 1, MAX_ASSISTANT_TOKENS, integer=True),
        method=METHODS[checks.choice("speculative method", method, METHODS)])
    return RaceRequest(prompt=message, preset=name, settings=settings, mode="race")


def pane_html(conversation: chat.Conversation, side: str, placeholder: str = "") -> str:
    """One side's history: each user turn (escaped) and this side's own answer, the
    speculative side's accepted guesses marked as in the race."""
    renderer = render.baseline_html if side == BASELINE else render.speculative_html
    turns = []
    for i, turn in enumerate(conversation.turns, 1):
        last = i == len(conversation.turns)
        note = " (stopped)" if turn.stopped() and not (last and conversation.busy) else ""
        error = turn.results.get(side).error if side in turn.results else None
        answer = renderer(turn.chunks[side], placeholder if last else "")
        turns.append(f'<div class="chat-turn" data-turn="{i}"><div class="chat-user"><b>You:</b> '
                     f'{render.esc(turn.user)}</div><div class="chat-answer">{answer}</div>'
                     + (f'<div class="chat-note">failed: {render.esc(error)}</div>' if error else "")
                     + (f'<div class="chat-note">{note.strip(" ()")}</div>' if note and not error else "")
                     + "</div>")
    body = "".join(turns) or f'<div class="chat-empty placeholder">{render.esc(placeholder or "no turns yet")}</div>'
    return f'<div class="chat-pane" data-side="{side}" data-turns="{len(conversation.turns)}">{body}</div>'


def stats_html(conversation: chat.Conversation, side: str) -> str:
    """The race's live counters, for this turn."""
    if not conversation.turns:
        return render.stats_html(None)
    turn = conversation.turns[-1]
    stats = chat.turn_stats(turn).get(side)
    state = "idle" if stats is None else ("done" if side in turn.results else "running")
    note = f"turn {len(conversation.turns)}"
    return render.stats_html(stats, note, state)


def turns_html(conversation: chat.Conversation) -> str:
    """Per turn and so far: each side's tok/s and the speedup."""
    if not conversation.turns:
        return ""
    rows = ["<table class='lanes-table chat-turns'><tr><th>turn</th><th>baseline tok/s</th>"
            "<th>speculative tok/s</th><th>speedup</th></tr>"]
    for i, turn in enumerate(conversation.turns, 1):
        stats = chat.turn_stats(turn)
        if len(turn.results) < len(SIDES) or len(stats) < len(SIDES):
            continue
        base, spec = (chat.Totals(stats[s].tokens, stats[s].elapsed_s) for s in SIDES)
        rows.append(_row(str(i) + (" (stopped)" if turn.stopped() else ""), base, spec, f"data-turn='{i}'"))
    totals = chat.cumulative(conversation)
    if totals[BASELINE].tokens:
        rows.append(_row("all turns", totals[BASELINE], totals["speculative"], "class='chat-total'"))
    rows.append("</table>")
    return "".join(rows)


def _row(label: str, base: chat.Totals, spec: chat.Totals, attrs: str) -> str:
    speedup = chat.speedup(base, spec)
    data = f" data-speedup='{speedup:.4f}'" if speedup is not None else ""
    cells = [label, f"{base.tokens_per_s:.1f}", f"{spec.tokens_per_s:.1f}",
             f"{speedup:.2f}×" if speedup is not None else "–"]
    return f"<tr {attrs}{data}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"


def chat_settings(arena, names: list, default: str, kiosk: bool) -> tuple:
    """The chat's Settings (hidden in a kiosk): pair, answer length, K, method."""
    with gr.Accordion("Settings", open=False, visible=not kiosk, elem_id="chat-settings"):
        with gr.Row():
            preset = gr.Dropdown(names, value=default, label="Model pair (preset; New chat to change it)",
                                 elem_id="chat-preset")
            max_new = gr.Slider(16, chat.MAX_NEW_TOKENS, value=96, step=16, label="Max new tokens per answer",
                                elem_id="chat-max-new-tokens")
            k = gr.Slider(1, MAX_ASSISTANT_TOKENS, value=min(arena.default_assistant_tokens(default),
                                                             MAX_ASSISTANT_TOKENS),
                          step=1, label="Assistant tokens (guesses per step)", elem_id="chat-k")
        method = gr.Radio(list(METHODS), value=method_label(arena.presets.get(default)),
                          label="Speculative method (New chat to change it)", elem_id="chat-method")
    return preset, max_new, k, method


def build(arena, race_handlers: int, kiosk: bool = False, door=None) -> None:
    from .visitors import QueueDoor, VisitorIds

    door = door or QueueDoor(VisitorIds(), arena.admission)
    names = list(arena.presets.presets)
    default = arena.presets.get(None).name
    method = method_of(arena, default)
    gr.Markdown(
        "Chat with both pipelines at once. Every turn is a race: the **main model alone** (left) and the "
        "**main model checking a draft's guesses** (right) answer the same message side by side. Each side "
        "remembers its own answers, so each is sent its own conversation so far, in the model's chat "
        f"template. A chat holds {chat.MAX_TURNS} turns and at most {chat.MAX_CHAT_TOKENS:,} tokens per side.")
    gr.Markdown(chat.kv_reuse(PipelineOptions(), method), elem_id="chat-kv-reuse")
    conversation = gr.State(lambda: chat.Conversation())  # one per visitor, made when the page loads
    message, send, stop, new = prompt_row("Message", "chat-input", "Send", "chat-send", "chat-stop", lines=2,
                                          placeholder="Say something to both models", new_id="chat-new")
    status = gr.Markdown("", elem_id="chat-status")
    gr.HTML(render.LEGEND_HTML)
    with gr.Row():
        panes, stats = {}, {}
        for side in SIDES:
            with gr.Column():
                gr.Markdown(f"### {TITLES[side]}", elem_classes=["lane-title"])
                panes[side] = gr.HTML(pane_html(chat.Conversation(), side), elem_id=f"chat-{side}")
                stats[side] = gr.HTML(render.stats_html(None), elem_id=f"chat-{side}-stats")
    turns = gr.HTML("", elem_id="chat-turns")
    preset, max_new, k, method_radio = chat_settings(arena, names, default, kiosk)
    outputs = [panes[side] for side in SIDES] + [stats[side] for side in SIDES] + [turns, status, message]

    def view(conv, status_text: str, placeholder: str = "", sides=SIDES, clear_message: bool = False) -> list:
        """The outputs; only the panes in `sides` are re-rendered (on 2 cores every millisecond of
        rendering is taken from the pipelines), and the message box is emptied only when asked."""
        keep = gr.update()
        return [pane_html(conv, side, placeholder) if side in sides else keep for side in SIDES] + \
               [stats_html(conv, side) if side in sides else keep for side in SIDES] + \
               [turns_html(conv), status_text, "" if clear_message else keep]

    def send_turn(http: gr.Request, text, preset_name, max_new_tokens, assistant_tokens, method, conv):
        try:
            request = parse_inputs(arena, text, preset_name, max_new_tokens, assistant_tokens, method)
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
        stop_flag = threading.Event()
        throttle, dirty, started = Throttle(), set(), False
        try:
            events = chat.run(arena, request, conv, stop_flag, door.ids.keys(http), heartbeats=True)
            try:
                for event in events:
                    if isinstance(event, Heartbeat):  # a prefill: a yield where Stop can land
                        yield [gr.update()] * (2 * len(SIDES) + 3)
                        continue
                    if isinstance(event, StatusEvent):
                        yield view(conv, f"{SPINNER} {event.message}", "waiting…", sides=())
                        continue
                    dirty.add(event.side)
                    if isinstance(event, (StartEvent, DoneEvent)) or throttle.ready():
                        # The message box empties once, when the turn starts: what the visitor types
                        # meanwhile stays for the next turn.
                        yield view(conv, f"Racing turn {len(conv.turns)}: both pipelines at once.", "thinking…",
                                   sides=tuple(dirty), clear_message=not started)
                        dirty.clear()
                        started = True
            finally:
                events.close()
        except DemoError as e:
            raise gr.Error(str(e), print_exception=False)
        finally:
            stop_flag.set()  # Stop pressed, tab closed, or finished: stop both sides
        yield view(conv, conv.full() or f"Turn {len(conv.turns)} done; send the next message.")

    inputs = [message, preset, max_new, k, method_radio, conversation]
    # preprocess=False: parse_inputs checks every raw value itself, as the race does.
    sent = send.click(send_turn, inputs, outputs, api_name="chat", preprocess=False,
                      concurrency_limit=race_handlers, concurrency_id="race")
    submitted = message.submit(send_turn, inputs, outputs, api_visibility="private", preprocess=False,
                               concurrency_limit=race_handlers, concurrency_id="race")
    door.heavy("a chat turn", sent, submitted)
    stop.click(lambda: STOPPED, None, status, cancels=[sent, submitted], api_visibility="private", queue=False)

    def new_chat():
        fresh = chat.Conversation()
        return [fresh] + view(fresh, "New chat: send a message.")

    new.click(new_chat, None, [conversation] + outputs, cancels=[sent, submitted], api_visibility="private",
              queue=False)
