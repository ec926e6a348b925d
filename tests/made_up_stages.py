"""Calibration stages that measure nothing: each returns made-up timings, so that
calibration's bookkeeping (which candidate is fastest, which main is fastest alone) can be
checked against numbers written by hand. Run in the child processes of demo.core.isolation.

Per token alone, main "gguf" takes 50 ms and "int4_sym" 25 ms (so int4_sym is the fastest
main alone: 40 tok/s) and "int4_channel" 20 ms; the draft 5 ms; every guess is right, and
every main reads the answers as the original GGUF does (quality 1.0 where gguf is measured).
"""

MAIN_STEP_S = {"gguf": 0.050, "int4_sym": 0.025, "int4_channel": 0.020}
DRAFT_STEP_S = 0.005


def measure_drafts(args, send):
    return {fmt: {"step_s": {mode: DRAFT_STEP_S for mode in args["threads"]}, "memory_bytes": 1 << 20}
            for fmt in args["folders"]}


def measure_main(args, send):
    step = MAIN_STEP_S[args["format"]]
    if args.get("alone_only"):  # as the real stage: reads and memory, no curve
        return {"verify_s": {}, "memory_bytes": 1 << 20, "dominated": True, "decode_step_s": None, "runs": {},
                "reads": [[1, 2, 3]]}
    curve = [step * (1 + 0.05 * m) for m in range(args["k_max"] + 1)]
    runs = {df: [[args["max_new_tokens"] - p for p in range(args["max_new_tokens"])]] for df in args["drafts"]}
    return {"verify_s": {mode: list(curve) for mode in args["threads"]}, "memory_bytes": 1 << 20,
            "dominated": False, "decode_step_s": step, "runs": runs if args.get("answer", True) else {},
            "reads": [[1, 2, 3]]}


def measure_overhead(args, send):
    ks = args["ks"]
    predicted = {str(k): args["predicted_step_s"][str(k)] for k in ks}
    return {"main_format": args["pair"][0], "draft_format": args["pair"][1], "measured_step_s": dict(predicted),
            "predicted_step_s": predicted, "extra_s": {str(k): 0.0 for k in ks}, "per_step_s": 0.0,
            "per_guess_s": 0.0, "baseline_step_s": args["one_token_s"], "baseline_overhead_s": 0.0,
            # race mode: the baseline beside it, its main named by its folder (tmp/main-FORMAT)
            **({"baseline_rates": [1 / MAIN_STEP_S[args["beside"].rsplit("main-", 1)[1]]] * 3, "beside_share": 1.0}
               if args.get("beside") else {})}


def measure_plain(args, send):
    # The real stage times each format's pipeline in rounds; here 3 rounds of exactly 1/step.
    return {"rates": {f: [1 / MAIN_STEP_S[f]] * 3 for f in args["folders"]}, "interleaved": True}

