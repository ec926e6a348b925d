"""How often the step view's rebuilt proposals match the run (demo.engine.steps), in default
and exact precision. By default the SmolLM2 fixture with its int4 weights drafting for its
gguf self; --preset qwen2.5-coder-embedded --draft-format gguf for the embedded pair.

    SPECDEC_CACHE_DIR=.cache-test python scripts/step_view_match.py
    python scripts/step_view_match.py --preset qwen2.5-coder-embedded --draft-format gguf \
        --k 5 --classes code --limit 4 --json bench-results/step-view-match-qwen.json

Prints, per precision, the steps whose rebuilt proposal differs from what the run kept, and
the pooled acceptance curve by position (demo.core.acceptance); --json writes them."""

import argparse
import json
import sys
from pathlib import Path

import openvino_genai

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from demo.core.acceptance import curve_of_chunks, pooled  # noqa: E402
from demo.core.bench_prompts import PROMPTS  # noqa: E402
from demo.core.machine import fingerprint  # noqa: E402
from demo.core.settings import GenerationSettings, PipelineOptions  # noqa: E402
from demo.engine import steps  # noqa: E402
from demo.engine.openvino_runner import template  # noqa: E402
from demo.engine.pipelines import PipelineCache  # noqa: E402
from demo.models.presets import load_presets  # noqa: E402
from demo.models.sources import ModelStore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="smollm2-self-draft")
    ap.add_argument("--draft-format", default="int4_sym", help="the draft's weight format (gguf, int4_sym, …)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--classes", default="", help="benchmark prompt classes, comma-separated (default: all)")
    ap.add_argument("--limit", type=int, default=0, help="the first N prompts of each class (default: all)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    K, NEW_TOKENS = args.k, args.new_tokens
    classes = [c for c in args.classes.split(",") if c]
    prompts = [p for p in PROMPTS if not classes or p.cls in classes]
    if args.limit:
        prompts = [p for i, p in enumerate(prompts) if sum(q.cls == p.cls for q in prompts[:i]) < args.limit]
    store, spec = ModelStore(), load_presets().get(args.preset)
    main_ir = store.prepare(spec.main, "main model").path
    draft_ir = store.prepare(spec.draft, "draft model", weight_format=args.draft_format).path
    tok = openvino_genai.Tokenizer(str(main_ir))
    flags = " ".join(dict(fingerprint()).get("isa_flags") or [])
    print("ISA flags:", flags)
    out = {"preset": args.preset, "draft_format": args.draft_format, "k": K, "new_tokens": NEW_TOKENS,
           "prompts": len(prompts), "isa_flags": flags}
    cache = PipelineCache(max_pairs=1)
    for exact in (False, True):
        options = PipelineOptions(exact=exact, threads=1)
        runner = cache.get(main_ir, draft_ir, "draft", options)["speculative"]
        n = differ = 0
        curves, seconds = [], 0.0
        for p in prompts:
            r = runner.run(p.text, GenerationSettings(max_new_tokens=NEW_TOKENS, assistant_tokens=K), lambda c: True)
            ids = tok.encode(template(tok, p.text)).input_ids.data[0].tolist()
            report = steps.reconstruct(draft_ir, options.with_threads(None), ids, [c.token_ids for c in r.chunks], K,
                                       lambda shown: {})
            n, differ, seconds = n + len(report.steps), differ + report.differ, seconds + report.seconds
            curves.append(curve_of_chunks(r.chunks, K))
        c = pooled(curves)
        name = "exact" if exact else "default"
        print(f"{name}: {len(prompts)} prompts, {n} steps, {differ} differ "
              f"({100 * (n - differ) / n:.1f} % match), rebuilt in {seconds:.1f} s; "
              f"curve {[round(x, 3) for x in c.rates()]}, {c.tokens_per_step():.2f} tokens per step")
        out[name] = {"steps": n, "differ": differ, "match": (n - differ) / n, "rebuild_s": seconds,
                     "curve": c.rates(), "tokens_per_step": c.tokens_per_step()}
        cache.clear()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
