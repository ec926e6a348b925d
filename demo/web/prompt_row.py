"""The row every race tab opens with: the prompt box beside its Run and Stop buttons (the race,
the three-way race, the chat), so each looks and behaves alike and is bounded alike."""

from __future__ import annotations

from typing import Optional

import gradio as gr

from ..core.settings import MAX_PROMPT_CHARS


def prompt_row(label: str, elem_id: str, run_label: str, run_id: str, stop_id: str, lines: int = 3,
               placeholder: str = "Ask something, or pick an example below",
               new_id: Optional[str] = None) -> tuple:
    """(prompt, run, stop), and a small "New chat" button after them where `new_id` is given."""
    with gr.Row():
        prompt = gr.Textbox(label=label, lines=lines, max_length=MAX_PROMPT_CHARS, elem_id=elem_id,
                            placeholder=placeholder, scale=5)
        with gr.Column(scale=1, min_width=140):
            run = gr.Button(run_label, variant="primary", elem_id=run_id)
            stop = gr.Button("Stop", variant="stop", elem_id=stop_id)
            new = gr.Button("New chat", elem_id=new_id, size="sm") if new_id else None
    return (prompt, run, stop, new) if new_id else (prompt, run, stop)
