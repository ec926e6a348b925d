"""A fake runner with the same interface as demo.pipelines.OpenVINORunner.

It replays canned chunks with real sleeps, so merging, stopping and replay logic can be
tested fast and deterministically without OpenVINO.
"""

import time

from demo.pipelines import RunResult
from demo.streaming import SPECULATIVE, Chunk


class FakeRunner:
    def __init__(self, side, chunk_sizes, delay_s=0.01, fail_with=None, first_token=1):
        self.side = side
        self.chunk_sizes = chunk_sizes
        self.delay_s = delay_s
        self.fail_with = fail_with
        self.first_token = first_token
        self.calls = 0

    def run(self, prompt, settings, on_chunk, on_start=lambda t: None):
        self.calls += 1
        result = RunResult(self.side, start=time.perf_counter(), end=0.0)
        on_start(result.start)
        if self.fail_with is not None:
            raise self.fail_with
        token = self.first_token
        for size in self.chunk_sizes:
            time.sleep(self.delay_s)
            ids = tuple(range(token, token + size))
            token += size
            text = "".join(f"t{i} " for i in ids)
            accepted = "".join(f"t{i} " for i in ids[:-1]) if self.side == SPECULATIVE else ""
            chunk = Chunk(self.side, ids, text, accepted, time.perf_counter())
            result.chunks.append(chunk)
            if not on_chunk(chunk):
                result.cancelled = True
                break
        result.end = time.perf_counter()
        return result
