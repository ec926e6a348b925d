"""Calibrate a preset on this machine: which weight formats and how many assistant tokens.

    python -m demo.calibrate --preset NAME [--json PATH] [--main-formats gguf,int8,f16]
                             [--draft-formats gguf,int8] [--k-max 8] [--force]

What is fastest depends on the CPU and on memory (../shared/design/models.md, "Machines
differ"): where a compressed MatMul costs almost K+1 times as much to verify K+1 tokens,
speculation barely pays; where the verify step is bound by memory, it pays a lot. So we
measure, for each candidate format:
  * the main model's cost for one forward step of M = 1..K_max+1 new tokens after a
    100-token prefix (the verify-cost curve), with the threads each mode gives a pipeline;
  * the draft's cost for one token;
  * resident memory of the compiled model;
and, once per preset, the acceptance: how many guesses each step accepted with K_max
guesses, on a few built-in prompts (the accepted prefix with K guesses is min(a, K)).
The standard model (Leviathan et al.) then predicts, per format pair, mode and K:
    speculative tok/s = τ(K) / (K·draft + verify(K+1)),   τ(K) = 1 + mean(min(a, K))
and we pick the fastest configuration that fits the memory budget (two pipelines each
compile the main model). Results are cached per machine fingerprint (CPU, ISA flags,
cores, RAM, OpenVINO version, model checksums) and reused.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from .errors import DemoError, run_command

PREFIX_TOKENS = 100
REPEATS = 5
DEFAULT_K_MAX = 8
DEFAULT_MAIN_FORMATS = ("gguf", "int8", "int4_sym", "f16")
DEFAULT_DRAFT_FORMATS = ("gguf", "int8")
CALIBRATION_VERSION = 1

Report = Callable[[str], None]


# -- the machine --------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def machine_fingerprint() -> tuple:
    """The machine part of the fingerprint (cached: it does not change while we run)."""
    import openvino

    from .bench import machine_info
    from .memory import total_bytes

    info = machine_info()
    return (("cpu", info.get("cpu_model")), ("isa_flags", tuple(info.get("isa_flags") or ())),
            ("cores", info.get("cores")), ("memory_bytes", total_bytes()), ("openvino", openvino.__version__))


def model_hash(spec) -> str:
    """A model's identity for calibration: its source and checksums, not the format asked for."""
    return hashlib.sha256(spec.model_dump_json(exclude_defaults=True, exclude={"format"}).encode()).hexdigest()[:16]


def fingerprint(preset, store) -> dict:
    """What the measurements depend on; a change in any of it means calibrating again."""
    fp = {k: list(v) if isinstance(v, tuple) else v for k, v in machine_fingerprint()}
    fp["models"] = {role: model_hash(spec) for role, spec in (("main", preset.main), ("draft", preset.draft))
                    if spec is not None}
    return fp


def calibrated_format(spec, store, mode: str = "race") -> Optional[str]:
    """The weight format this machine's calibration chose for `spec` in `mode`, or None.

    What `format: auto` in models.yaml resolves to (demo.formats.resolve_auto_format);
    cheap: a few small JSON files, no model is loaded.
    """
    machine = {k: list(v) if isinstance(v, tuple) else v for k, v in machine_fingerprint()}
    wanted = model_hash(spec)
    for path in sorted((store.cache_dir / "calibration").glob("*.json")):
        try:
            result = json.loads(path.read_text())
            fp = result["fingerprint"]
            if any(fp.get(k) != v for k, v in machine.items()):
                continue
            for role in ("main", "draft"):
                if fp["models"].get(role) == wanted:
                    return result["choice"][mode][f"{role}_format"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged or foreign file is ignored, never fatal
    return None


def _key(fp: dict) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:12]


def cache_path(store, preset_name: str, fp: dict) -> Path:
    return store.cache_dir / "calibration" / f"{preset_name}-{_key(fp)}.json"


def load_cached(store, preset) -> Optional[dict]:
    """This machine's calibration of `preset`, or None (cheap: no model is loaded)."""
    try:
        path = cache_path(store, preset.name, fingerprint(preset, store))
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# -- measuring ----------------------------------------------------------------------------

def _rss() -> int:
    from .memory import rss_bytes

    return rss_bytes()


def step_costs(folder: Path, ms: Sequence[int], threads: Optional[int], repeats: int = REPEATS) -> tuple[list, int]:
    """Seconds of one forward step of M new tokens after a PREFIX_TOKENS prefix (fastest of REPEATS), for
    each M in `ms` (a list in that order); and the resident bytes the compiled model added.

    Uses the stateful IR directly (no pipeline): the KV state after the prefix is saved
    once and restored before every timed step, so each step sees the same past.
    """
    import gc

    import numpy as np
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "ENABLE_CPU_PINNING": False} if threads else {}
    before = _rss()
    compiled = core.compile_model(str(folder / "openvino_model.xml"), "CPU", config)
    request = compiled.create_infer_request()
    rng = np.random.default_rng(0)
    prefix = rng.integers(100, 5000, size=(1, PREFIX_TOKENS), dtype=np.int64)

    def feed(ids: np.ndarray, past: int) -> None:
        n = ids.shape[1]
        request.infer({
            "input_ids": ids,
            "attention_mask": np.ones((1, past + n), dtype=np.int64),
            "position_ids": np.arange(past, past + n, dtype=np.int64)[None, :],
            "beam_idx": np.zeros(1, dtype=np.int32),
        })

    request.reset_state()
    feed(prefix, 0)
    saved = [(s, ov.Tensor(np.array(s.state.data, copy=True))) for s in request.query_state()]
    feed(prefix[:, :1], PREFIX_TOKENS)  # warm the single-token kernels
    memory = max(0, _rss() - before)
    costs = []
    for m in ms:
        ids = rng.integers(100, 5000, size=(1, m), dtype=np.int64)
        samples = []
        for _ in range(repeats + 1):  # the first run of a new shape compiles kernels: dropped
            for state, tensor in saved:
                state.state = tensor
            t0 = time.perf_counter()
            feed(ids, PREFIX_TOKENS)
            samples.append(time.perf_counter() - t0)
        # The minimum, not the median: on a shared 2-core box other work only ever adds
        # time, so the fastest of a few runs is the closest to what the step itself costs.
        costs.append(min(samples[1:]))
    del request, compiled, saved
    gc.collect()
    return costs, memory


def accepted_per_step(runners: dict, prompts: Sequence[str], k_max: int, max_new_tokens: int,
                      stop: Optional[threading.Event] = None) -> list[int]:
    """Guesses accepted in each step with K_max guesses (first and last step left out:
    the first is the prefill's token, the last may be cut by the token limit)."""
    from .settings import GenerationSettings
    from .streaming import SPECULATIVE

    settings = GenerationSettings(max_new_tokens=max_new_tokens, assistant_tokens=k_max)
    out: list[int] = []
    for prompt in prompts:
        if stop is not None and stop.is_set():
            break
        result = runners[SPECULATIVE].run(prompt, settings, lambda c: not (stop and stop.is_set()))
        if result.error:
            raise DemoError(f"The speculative pipeline failed while calibrating ({result.error}).")
        out += [c.accepted for c in result.chunks[1:-1]]
    return out


def tokens_per_step(accepted: Sequence[int], k: int) -> float:
    """τ(K): expected tokens per verify step with K guesses, from steps measured with more."""
    if not accepted:
        return 1.0
    return 1.0 + sum(min(a, k) for a in accepted) / len(accepted)


def predict(verify: Sequence[float], draft_step: float, accepted: Sequence[int], k: int) -> dict:
    """Standard model: tok/s of the main model alone and of speculation with K guesses.

    `verify[M - 1]` is the cost of one main-model step of M tokens."""
    tau = tokens_per_step(accepted, k)
    step = k * draft_step + verify[k]
    return {"k": k, "tokens_per_step": tau, "step_s": step,
            "speculative_tok_s": tau / step, "baseline_tok_s": 1.0 / verify[0]}


# -- the whole calibration ----------------------------------------------------------------

def calibrate(preset, store, *, main_formats: Sequence[str] = DEFAULT_MAIN_FORMATS,
              draft_formats: Sequence[str] = DEFAULT_DRAFT_FORMATS, k_max: int = DEFAULT_K_MAX,
              prompts: Optional[Sequence[str]] = None, max_new_tokens: int = 96,
              budget: Optional[int] = None, report: Report = lambda m: None,
              stop: Optional[threading.Event] = None) -> dict:
    from .bench_prompts import select
    from .memory import budget_bytes, gb
    from .pipelines import PipelineCache
    from .settings import PipelineOptions, cpu_cores, race_threads

    if preset.draft is None:
        raise DemoError(f"Preset {preset.name!r} has no draft model; there is nothing to calibrate.")
    started = time.time()
    budget = budget_bytes() if budget is None else budget
    threads = {"fair": None, "race": race_threads()}
    ms = list(range(1, k_max + 2))

    def check_stop():
        if stop is not None and stop.is_set():
            raise DemoError("Calibration was stopped; nothing was saved.")

    def prepare(spec, role, fmt):
        check_stop()
        report(f"preparing the {role} as {fmt}")
        return store.prepare(spec, role, lambda stage, d, t: report(f"{stage}"), weight_format=fmt,
                             cancel=stop).path

    mains, drafts = {}, {}
    for fmt in main_formats:
        folder = prepare(preset.main, "main model", fmt)
        curves, memory = {}, 0
        for mode, n in threads.items():
            check_stop()
            report(f"measuring the main model ({fmt}, {mode} threads): verify cost for 1..{k_max + 1} tokens")
            costs, mem = step_costs(folder, ms, n)
            curves[mode], memory = costs, max(memory, mem)
        mains[fmt] = {"folder": str(folder), "verify_s": curves, "memory_bytes": memory}
    for fmt in draft_formats:
        folder = prepare(preset.draft, "draft model", fmt)
        steps, memory = {}, 0
        for mode, n in threads.items():
            check_stop()
            report(f"measuring the draft model ({fmt}, {mode} threads)")
            costs, mem = step_costs(folder, [1], n)
            steps[mode], memory = costs[0], max(memory, mem)
        drafts[fmt] = {"folder": str(folder), "step_s": steps, "memory_bytes": memory}

    # Acceptance belongs to the pair of models, not to their weight layout: measure it once,
    # on the first formats, with all cores.
    check_stop()
    report(f"measuring acceptance with {k_max} guesses per step")
    texts = list(prompts) if prompts else [p.text for p in select(["code"], 2) + select(["chat"], 1)]
    cache = PipelineCache(max_pairs=1)
    runners = cache.get(Path(mains[main_formats[0]]["folder"]), Path(drafts[draft_formats[0]]["folder"]),
                        "draft", PipelineOptions(threads=None))
    accepted = accepted_per_step(runners, texts, k_max, max_new_tokens, stop)
    cache.clear()
    del runners
    check_stop()

    candidates = []
    for mf, m in mains.items():
        for df, d in drafts.items():
            need = 2 * m["memory_bytes"] + d["memory_bytes"]
            for mode in threads:
                verify = m["verify_s"][mode]
                for k in range(1, k_max + 1):
                    p = predict(verify, d["step_s"][mode], accepted, k)
                    candidates.append({"main_format": mf, "draft_format": df, "mode": mode, **p,
                                       "memory_bytes": need, "fits": need <= budget})
    choice = {}
    for mode in threads:
        fitting = [c for c in candidates if c["mode"] == mode and c["fits"]]
        if not fitting:
            raise DemoError(f"No format pair of {preset.name!r} fits in {gb(budget)} of memory; "
                            "free memory or choose a smaller preset.")
        choice[mode] = max(fitting, key=lambda c: c["speculative_tok_s"])
    alone = max((c for c in candidates if c["mode"] == "fair" and c["fits"]), key=lambda c: c["baseline_tok_s"])
    fp = fingerprint(preset, store)
    result = {
        "calibration_version": CALIBRATION_VERSION,
        "preset": preset.name,
        "fingerprint": fp,
        "started_at": started,
        "duration_s": round(time.time() - started, 1),
        "k_max": k_max,
        "prefix_tokens": PREFIX_TOKENS,
        "threads": {mode: n for mode, n in threads.items()},
        "cores": cpu_cores(),
        "budget_bytes": budget,
        "main": {f: {k: v for k, v in m.items() if k != "folder"} for f, m in mains.items()},
        "draft": {f: {k: v for k, v in d.items() if k != "folder"} for f, d in drafts.items()},
        "accepted_per_step": accepted,
        "acceptance": (sum(accepted) / (len(accepted) * k_max)) if accepted else None,
        "candidates": candidates,
        "choice": choice,
        "fastest_alone": {"main_format": alone["main_format"], "baseline_tok_s": alone["baseline_tok_s"]},
    }
    path = cache_path(store, preset.name, fp)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(path)
    result["path"] = str(path)
    return result


def summary_lines(result: dict) -> list[str]:
    lines = [f"calibration of {result['preset']} ({result['duration_s']} s, {result['cores']} cores, "
             f"ISA {' '.join(result['fingerprint']['isa_flags'] or [])})"]
    for fmt, m in result["main"].items():
        fair = m["verify_s"]["fair"]
        one = fair[0]
        curve = " ".join(f"{v / one:.2f}" for v in fair)
        lines.append(f"  main {fmt:9s} 1 token {one * 1000:6.1f} ms; cost of M=1..{len(fair)} tokens ÷ 1 token: {curve}"
                     f"; {m['memory_bytes'] / (1 << 30):.1f} GB")
    for fmt, d in result["draft"].items():
        lines.append(f"  draft {fmt:8s} 1 token {d['step_s']['fair'] * 1000:6.1f} ms")
    if result["acceptance"] is not None:
        lines.append(f"  acceptance with K={result['k_max']}: {result['acceptance'] * 100:.0f}% "
                     f"({len(result['accepted_per_step'])} steps)")
    for mode, c in result["choice"].items():
        lines.append(f"  {mode:4s}: main {c['main_format']}, draft {c['draft_format']}, K={c['k']}: predicted "
                     f"{c['speculative_tok_s']:.1f} tok/s vs {c['baseline_tok_s']:.1f} alone "
                     f"({c['speculative_tok_s'] / c['baseline_tok_s']:.2f}×)")
    fa = result["fastest_alone"]
    lines.append(f"  fastest main alone: {fa['main_format']} at {fa['baseline_tok_s']:.1f} tok/s (predicted)")
    return lines


def write_plot(result: dict, path: Path) -> None:
    """This machine's verify-cost curves: cost of one main-model step of M tokens ÷ one token."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, mode in zip(axes, ("fair", "race")):
        for fmt, m in result["main"].items():
            curve = m["verify_s"][mode]
            ax.plot(range(1, len(curve) + 1), [v / curve[0] for v in curve], marker="o",
                    label=f"{fmt} ({curve[0] * 1000:.0f} ms for 1 token)")
        top = len(next(iter(result["main"].values()))["verify_s"][mode])
        ax.plot([1, top], [1, top], ":", color="grey", label="each token costs a full step")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        threads = result["threads"][mode]
        ax.set_title(f"{mode}: {threads or 'all'} thread(s) per pipeline")
        ax.set_xlabel("tokens checked in one main-model step (K + 1)")
        ax.legend(fontsize="small")
    axes[0].set_ylabel("step cost ÷ cost of 1 token")
    flags = " ".join(result["fingerprint"].get("isa_flags") or [])
    fig.suptitle(f"Verify-cost curves, {result['preset']} main model ({flags})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m demo.calibrate", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", help="preset name (default: models.yaml's default)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--plot", type=Path, help="write the verify-cost curves as a PNG here")
    ap.add_argument("--main-formats", default=",".join(DEFAULT_MAIN_FORMATS))
    ap.add_argument("--draft-formats", default=",".join(DEFAULT_DRAFT_FORMATS))
    ap.add_argument("--k-max", type=int, default=DEFAULT_K_MAX)
    ap.add_argument("--force", action="store_true", help="measure again even if this machine has a result")
    ap.add_argument("--models", type=Path)
    ap.add_argument("--cache-dir", type=Path)
    args = ap.parse_args(argv)

    def body() -> int:
        from .presets import load_presets
        from .sources import ModelStore

        if not 1 <= args.k_max <= 16:
            raise DemoError("--k-max must be from 1 to 16.")
        store = ModelStore(args.cache_dir)
        preset = load_presets(args.models).get(args.preset)
        result = None if args.force else load_cached(store, preset)
        if result is None:
            result = calibrate(preset, store, main_formats=_formats(args.main_formats),
                               draft_formats=_formats(args.draft_formats), k_max=args.k_max,
                               report=lambda m: print(f"  … {m}", file=sys.stderr, flush=True))
        else:
            print("(cached for this machine; --force measures again)", file=sys.stderr)
        print("\n".join(summary_lines(result)))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        if args.plot:
            write_plot(result, args.plot)
        return 0

    return run_command(body, interrupted="calibration interrupted; nothing was saved")


def _formats(text: str) -> list[str]:
    from .formats import FORMATS

    out = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in out if f not in FORMATS]
    if not out or bad:
        raise DemoError(f"Formats must be a comma-separated list of: {', '.join(FORMATS)}.")
    return out


if __name__ == "__main__":
    sys.exit(main())
