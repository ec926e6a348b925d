"""Experiment (issue 30): where a decoding engine's CPU time goes, thread by thread, from Linux
`perf` samples taken while it answers code prompts (its load and warm-up not sampled).

OpenVINO's performance counters (op_profile.py) time its operations; this sees what they do
not: the work between them (the CPU plugin's graph machinery on the calling thread) and a
worker thread's wait for it. Each sample is put in a room by the library it fell in:

    kernels        OpenVINO's JIT-generated code (its matmul and elementwise kernels); ggml's
    plugin         the CPU plugin's compiled C++ (graph execution, shape handling, non-JIT kernels)
    threading      TBB, OpenMP (llama.cpp), the kernel's scheduler and sched_yield, ggml's graph loop:
                   a thread waiting for the other
    libc           malloc, memcpy, memcmp
    other          everything else (openvino core, GenAI, Python)

    python scripts/experiments/thread_profile.py --main MAIN_IR [--draft DRAFT_IR --k 4] \
        [--gguf MAIN.gguf] [--prompts 5] [--rounds 2] [--json OUT.json]

Engines: `spec` (main + draft, K guesses) when --draft is given, `base` (the main alone), and
`llama.cpp` (plain decoding of --gguf, when llama-cpp-python is installed), each built with the
properties the arena uses in fair mode, one after another. Needs `perf` and
kernel.perf_event_paranoid <= 2 (a process may profile its own children and itself).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from demo.core.bench_prompts import select  # noqa: E402
from demo.core.machine import machine_info  # noqa: E402
from demo.core.placement import PRECISION_HINT, SAMPLER_PROPERTIES  # noqa: E402
from demo.core.settings import cpu_cores  # noqa: E402
from spec_knobs import build, run_once  # noqa: E402

# The arena's properties for every pipeline (calibration's f32 choice on this class).
PROPERTIES = {PRECISION_HINT: "f32", **SAMPLER_PROPERTIES}


def room(dso: str, symbol: str) -> str:
    if "ggml" in dso and "graph_compute_thread" in symbol:
        return "threading"  # ggml's barrier between operations spins inside this loop
    if dso.startswith("[JIT]") or "ggml" in dso:
        return "kernels"
    if "intel_cpu_plugin" in dso:
        return "plugin"
    if "libtbb" in dso or "libgomp" in dso or dso == "[kernel.kallsyms]":
        return "threading"
    if dso.startswith("libc.so"):
        return "libc"
    return "other"


def sampled(work, out: Path) -> float:
    """Run work() with `perf record` on this process; the seconds it took."""
    perf = subprocess.Popen(["perf", "record", "-q", "-F", "2999", "-p", str(os.getpid()), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # perf attaches to every thread
    start = time.perf_counter()
    work()
    took = time.perf_counter() - start
    perf.send_signal(signal.SIGINT)
    perf.wait()
    return took


def rooms_by_thread(data: Path) -> dict:
    """The rooms of a `perf record` file (rooms(): its report by thread, library and symbol)."""
    return rooms(subprocess.run(["perf", "report", "-i", str(data), "--sort", "pid,dso,sym", "--stdio", "-n",
                                 "-t", "\t"], capture_output=True, text=True, check=True).stdout)


def rooms(report: str) -> dict:
    """{"threads": the busiest threads, each with its share of all samples, its samples by
    room and its busiest symbols; "libraries": every library's share of all samples}, from
    `perf report --sort pid,dso,sym -n -t TAB`: overhead, samples, thread, library, symbol."""
    threads: dict = defaultdict(lambda: defaultdict(float))
    symbols: dict = defaultdict(lambda: defaultdict(int))
    for line in report.splitlines():
        fields = [f.strip() for f in line.split("\t")]
        if line.startswith("#") or len(fields) < 3 or not fields[0].endswith("%"):
            continue
        # Sample counts, not the rounded percentages: thousands of JIT addresses each under 0.01 %.
        dso, symbol = fields[3], fields[4] if len(fields) > 4 else ""
        threads[fields[2]][room(dso, symbol)] += int(fields[1])
        symbols[fields[2]][f"{dso} {symbol}"] += int(fields[1])
    total = sum(sum(r.values()) for r in threads.values())
    libraries: dict = defaultdict(int)
    for by_symbol in symbols.values():
        for key, n in by_symbol.items():
            libraries[key.split(" ", 1)[0] if not key.startswith("[JIT]") else "[JIT]"] += n
    busiest = sorted(threads.items(), key=lambda t: -sum(t[1].values()))[:3]
    described = []
    for name, by_room in busiest:
        n = sum(by_room.values())
        if n > total / 100:
            described.append({
                "thread": name, "share": 100 * n / total,
                "rooms": {k: v / n for k, v in sorted(by_room.items(), key=lambda kv: -kv[1])},
                "top": [(sym, c / n) for sym, c in sorted(symbols[name].items(), key=lambda kv: -kv[1])[:8]]})
    return {"libraries": {k: n / total for k, n in sorted(libraries.items(), key=lambda kv: -kv[1])},
            "threads": described}


def profile_openvino(args, name: str, prompts: list[str], out: Path) -> dict:
    speculative = name == "spec"
    pipe = build(args.main, args.draft, PROPERTIES, speculative)
    for text in prompts[:2]:
        run_once(pipe, text, args.k, 32, speculative)  # warm-up: the plugin's first-inference work
    rates: list[float] = []
    took = sampled(lambda: rates.extend(run_once(pipe, text, args.k, args.max_new_tokens, speculative)["decode_tok_s"]
                                        for _ in range(args.rounds) for text in prompts), out)
    del pipe
    return {"decode_tok_s_median": statistics.median(rates), "seconds": took, **rooms_by_thread(out)}


def profile_llamacpp(args, prompts: list[str], out: Path) -> dict:
    import openvino_genai

    from demo.engine.llamacpp import LlamaCppRunner

    tokenizer = openvino_genai.Tokenizer(str(args.main))
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
             for p in prompts]
    llama = LlamaCppRunner(args.gguf, cpu_cores())
    for text in texts[:2]:
        llama.run(text, 32)
    rates: list[float] = []

    def work():
        for _ in range(args.rounds):
            for text in texts:
                times = llama.run(text, args.max_new_tokens)
                if len(times) > 1:  # an answer of one token has no decode rate
                    rates.append((len(times) - 1) / (times[-1] - times[0]))

    took = sampled(work, out)
    return {"decode_tok_s_median": statistics.median(rates), "seconds": took, **rooms_by_thread(out)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--main", required=True, type=Path, help="the main model's IR folder")
    ap.add_argument("--draft", type=Path, help="the draft's IR folder (profiles the speculative pipeline too)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--gguf", type=Path, help="the main's GGUF file (profiles llama.cpp too)")
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--engines", help="a comma-separated subset of spec,base,llama.cpp (default: all given)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    if shutil.which("perf") is None:
        ap.error("perf is not installed; install your distribution's linux-perf (or linux-tools) package.")
    if int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) > 2:
        ap.error("perf may not sample this process; run: sysctl kernel.perf_event_paranoid=2")
    prompts = [p.text for p in select(["code"], args.prompts)]
    info = machine_info()
    print(f"CPU: {info.get('cpu_model')}; flags {' '.join(info.get('isa_flags', []))}", flush=True)
    engines = args.engines.split(",") if args.engines else (
        (["spec"] if args.draft else []) + ["base"] + (["llama.cpp"] if args.gguf else []))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in engines:
            data = Path(tmp) / f"{name}.data"
            results[name] = (profile_llamacpp(args, prompts, data) if name == "llama.cpp"
                             else profile_openvino(args, name, prompts, data))
            r = results[name]
            print(f"{name}: {r['decode_tok_s_median']:.1f} tok/s decode (median), {r['seconds']:.1f} s sampled")
            for t in r["threads"]:
                rooms = ", ".join(f"{k} {v:.0%}" for k, v in t["rooms"].items() if v >= 0.005)
                print(f"  thread {t['thread']}: {t['share']:.0f}% of the samples; {rooms}")
            print("  libraries: " + ", ".join(f"{k} {v:.1%}" for k, v in r["libraries"].items() if v >= 0.001))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "k": args.k, "max_new_tokens": args.max_new_tokens,
                                         "engines": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
