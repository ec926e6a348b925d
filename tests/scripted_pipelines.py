"""The arena without OpenVINO's pipelines, for page tests that do not test the engine (issue 60).

`scripted_arena(cache_dir)` is the real front door (presets, model store, admission, planning,
summaries, the warm-up) over a pipeline cache whose sides are ScriptedSide: the preset's own
tokenizer templates, counts and checks each prompt (PromptChecks, as a real side's), and a run
streams a fixed answer's tokens at a fixed pace, one token a step for the baseline and K + 1 for
the speculative side, every guess right (so both sides say the same, as in exact mode). Nothing
is compiled, so ProvenGuard stands in for the native guard. `python app.py` serves it through
`app.make_demo(arena=...)`, the way httpx's MockTransport stands in for the network.

Where the engine is the subject (streaming, Stop reaching a child, exact mode, numbers OpenVINO
reports), tests keep the real pipelines.
"""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from demo.core.settings import GenerationSettings
from demo.core.streaming import BASELINE, SIDES, Chunk, RunResult
from demo.engine.pipelines import PairKey, PipelineCache, PromptChecks

from .fakes import ProvenGuard

ANSWER = ('Here is a function that does it:\n\n```python\ndef reverse_words(text: str) -> str:\n'
          '    """Return the words of `text` in reverse order."""\n    return " ".join(reversed(text.split()))\n```\n\n'
          'It splits on whitespace, reverses the list and joins it again; an empty string gives an empty '
          'string. ')


_TOKENIZING = threading.Lock()


@functools.lru_cache(maxsize=4)
def _answer(folder: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """ANSWER's token ids in `folder`'s tokenizer and the text each adds, worked out once, so a
    run needs no tokenizer. Under a lock: the two sides working this out at once in one shared
    tokenizer hung a test (2026-12-08; both threads inside `encode`), though the arena's own sides
    count their prompts at once in every race without trouble; the cause was not pinned down."""
    from demo.engine.pipelines import shared_tokenizer

    with _TOKENIZING:
        tokenizer = shared_tokenizer(folder)
        ids = [int(i) for i in tokenizer.encode(ANSWER, add_special_tokens=False).input_ids.data[0].tolist()]
        texts = [tokenizer.decode(ids[:n]) if n else "" for n in range(len(ids) + 1)]
    return tuple(ids), tuple(texts[n + 1][len(texts[n]):] for n in range(len(ids)))


class ScriptedSide(PromptChecks):
    """One side of a pair with the runner interface (run, check_prompt, count_tokens,
    template) and the cache's (alive, resident_bytes, close), and no pipeline."""

    def __init__(self, key: PairKey, side: str, seconds_a_step: float):
        with _TOKENIZING:
            super().__init__(key, side)
        self.seconds_a_step = seconds_a_step
        self.answer_ids, self.answer_texts = _answer(str(key.main_of(side)))

    def alive(self) -> bool:
        return True

    def resident_bytes(self) -> int:
        return 0

    def close(self) -> None:
        pass

    def run(self, prompt, settings: GenerationSettings, on_chunk: Callable[[Chunk], bool],
            on_start: Callable[[float], None] = lambda t: None, stop: Optional[threading.Event] = None) -> RunResult:
        with _TOKENIZING:
            self.check_prompt(prompt, settings)
        n_answer = len(self.answer_ids)
        ids = [self.answer_ids[n % n_answer] for n in range(settings.max_new_tokens)]
        texts = [self.answer_texts[n % n_answer] for n in range(settings.max_new_tokens)]
        k = settings.assistant_tokens or 3
        size = 1 if self.side == BASELINE else k + 1
        result = RunResult(self.side, start=time.perf_counter(), end=0.0)
        on_start(result.start)
        for at in range(0, len(ids), size):
            time.sleep(self.seconds_a_step)
            if stop is not None and stop.is_set():
                result.cancelled = True
                break
            step = tuple(ids[at:at + size])
            text, accepted = "".join(texts[at:at + len(step)]), "".join(texts[at:at + len(step) - 1]) if size > 1 else ""
            result.chunks.append(Chunk(self.side, step, text, accepted, time.perf_counter()))
            if not on_chunk(result.chunks[-1]):
                result.cancelled = True
                break
        result.end = time.perf_counter()
        made = sum(len(c.token_ids) for c in result.chunks)
        result.ov_generated_tokens = made
        if result.chunks:
            result.ov_ttft_ms = (result.chunks[0].t - result.start) * 1000
            result.ov_tpot_ms = (result.end - result.chunks[0].t) * 1000 / max(made - 1, 1)
        if self.side != BASELINE:
            result.ov_accepted_tokens = sum(len(c.token_ids) - 1 for c in result.chunks[:-1])
            result.ov_draft_tokens = k * len(result.chunks)
        return result


def scripted_arena(cache_dir: Path, seconds_a_step: float = 0.02, presets=None):
    """The arena on `cache_dir` (its models prepared, as the session's store has them), its
    pipelines scripted: each side steps every `seconds_a_step`."""
    from demo.engine.arena import Arena
    from demo.models.presets import load_presets
    from demo.models.sources import ModelStore

    def side(key: PairKey, side: str, status=lambda m: None, warmup: bool = True) -> ScriptedSide:
        return ScriptedSide(key, side, seconds_a_step)

    def pair(key: PairKey, status=lambda m: None) -> dict:
        return {s: side(key, s) for s in SIDES}

    cache = PipelineCache(side_builder=side, pair_builder=pair)
    return Arena(presets or load_presets(), ModelStore(cache_dir), cache=cache, guard=ProvenGuard())
