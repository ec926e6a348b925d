"""How often the step view's rebuilt proposals match the run (demo.engine.steps), in default
and exact precision, on the SmolLM2 fixture with its int4 weights drafting for its gguf self.

    SPECDEC_CACHE_DIR=.cache-test python scripts/step_view_match.py

Prints, per precision, the steps whose rebuilt proposal differs from what the run kept, and
the pooled acceptance curve by position (demo.core.acceptance)."""

import openvino_genai

from demo.core.acceptance import curve_of_chunks, pooled
from demo.core.bench_prompts import PROMPTS
from demo.core.machine import fingerprint
from demo.core.settings import GenerationSettings, PipelineOptions
from demo.engine import steps
from demo.engine.openvino_runner import template
from demo.engine.pipelines import PipelineCache
from demo.models.presets import load_presets
from demo.models.sources import ModelStore

K, NEW_TOKENS = 4, 128


def main() -> None:
    store, spec = ModelStore(), load_presets().get("smollm2-self-draft")
    main_ir = store.prepare(spec.main, "main model").path
    draft_ir = store.prepare(spec.draft, "draft model", weight_format="int4_sym").path
    tok = openvino_genai.Tokenizer(str(main_ir))
    print("ISA flags:", " ".join(dict(fingerprint()).get("isa_flags") or []))
    cache = PipelineCache(max_pairs=1)
    for exact in (False, True):
        options = PipelineOptions(exact=exact, threads=1)
        runner = cache.get(main_ir, draft_ir, "draft", options)["speculative"]
        n = differ = 0
        curves, seconds = [], 0.0
        for p in PROMPTS:
            r = runner.run(p.text, GenerationSettings(max_new_tokens=NEW_TOKENS, assistant_tokens=K), lambda c: True)
            ids = tok.encode(template(tok, p.text)).input_ids.data[0].tolist()
            report = steps.reconstruct(draft_ir, options.with_threads(None), ids, [c.token_ids for c in r.chunks], K,
                                       lambda shown: {})
            n, differ, seconds = n + len(report.steps), differ + report.differ, seconds + report.seconds
            curves.append(curve_of_chunks(r.chunks, K))
        c = pooled(curves)
        print(f"{'exact' if exact else 'default'}: {len(PROMPTS)} prompts, {n} steps, {differ} differ "
              f"({100 * (n - differ) / n:.1f} % match), rebuilt in {seconds:.1f} s; "
              f"curve {[round(x, 3) for x in c.rates()]}, {c.tokens_per_step():.2f} tokens per step")


if __name__ == "__main__":
    main()
