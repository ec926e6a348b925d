"""Prove that the test suite has teeth: break the code on purpose and watch the tests fail.

    python scripts/mutation_check.py            # every mutation (about 5½ minutes on 2 cores)
    python scripts/mutation_check.py -k stop    # only mutations whose name contains "stop"
    python scripts/mutation_check.py --list     # show the mutations and their tests
    python scripts/mutation_check.py --anchors  # only check that every patch still applies

`bash scripts/test.sh --mutants` runs this after the suite passes, with --passed and the
suite's JUnit report, so that the unpatched run below is not repeated (CI's `bash
scripts/test.sh` runs the suite only, to stay within 30 minutes).

It copies the repository's files (`git ls-files`, plus new untracked files under demo/, lab/
and tests/) into a temporary folder, one copy per pytest session running at a time (-j; 2 by
default, 1 on a single core). First every mutation's tests run on the unpatched copies and
must pass, so a failure can be blamed on a mutation. Then, for each mutation, it applies one
textual patch to one demo/ (or lab/) module of a copy, runs the mutation's tests there
(`pytest -x -q -p no:cacheprovider`) and puts the copy back exactly as it was (the patched
file rewritten, anything the tests left in the copy removed, every file compared byte for
byte), so no mutant leaks into the next run. The mutant must be KILLED: a test fails
(pytest's summary counts a failure; a fixture or collection error is an ERROR, not a kill).

Each pytest session runs in a process of its own, forked from this one after it has imported
the heavy third-party libraries (OpenVINO, openvino_genai, Gradio, ...) once: the child
changes into its copy and calls pytest.main, so demo/, lab/, tests/ and app.py are imported
afresh, from the copy, in every child (this process never imports them, a child checks that
it did not import them from anywhere else, and no bytecode is written, so a patched module is
never served from a stale .pyc). Where fork is unavailable, or a library left a thread running
here, each session is a fresh `python -m pytest` instead (--no-fork forces that).

Two sessions at a time fill both cores of a 2-core machine (most sessions are one thread,
or waiting): 5½ minutes there against 7½ one at a time. With more than one, the unpatched
run is one session per test file (else one session for all); the files in SLOW_FILES start
first, the mutants follow longest first (by their tests' time in the unpatched run), and a
test in ALONE, whose outcome depends on the machine's speed while it runs, runs with
nothing beside it.

Prepared models are not converted again: the copies share $SPECDEC_CACHE_DIR (default: this
checkout's .cache-test, as scripts/test.sh uses).

It prints a line per finished mutant, then a table (mutation, tests run, result, seconds),
and exits non-zero when any mutant SURVIVED, when a patch no longer applies (its anchor text
is not in its module exactly once: update the mutation next to the code change;
tests/test_mutation_anchors.py catches this in the suite), when a test it names is gone, or
when the unpatched tests fail.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300  # per mutant's pytest run; tests have their own hang guards, so this is a last resort
CLEAN_TIMEOUT_S = 1800  # the unpatched run holds every mutation's tests
BIG_FILE = 20 << 20  # tracked files larger than this are linked into the copy, not copied
PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider")
ENV = dict(GRADIO_ANALYTICS_ENABLED="False", HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="1",
           PYTHONDONTWRITEBYTECODE="1")
# Imported once by the fork server, before any child starts: the third-party libraries that
# demo/ and the tests import (seconds of start-up each, paid once instead of once a mutant).
# Never demo, lab, tests or app: those must come from the patched copy, fresh in each child.
PRELOAD = ("numpy", "yaml", "pydantic", "psutil", "pandas", "huggingface_hub", "openvino", "openvino_genai",
           "openvino_tokenizers", "gradio", "gradio_client", "fastapi", "uvicorn", "httpx", "pytest")
OWN_MODULES = ("demo", "lab", "tests", "app", "conftest")
# Two sessions run at a time (-j 2, the default on 2 or more cores), each in its own copy.
# A test here runs alone, nothing beside it. This one calibrates real models in child
# processes, which pruned a format on timings that a second session shifted; it now turns
# pruning off ($NO_PRUNING), and running it alone keeps its time out of the other sessions.
ALONE = ("tests/test_native_safety.py::test_calibration_skips_a_crashing_format_and_resumes_after_an_interruption",)
# Test files whose selections load real pipelines or run a calibration: with -j 2 their
# unpatched sessions start first and the quick ones fill in beside them (an order only:
# a stale entry costs seconds, never a result). The mutants are then ordered by what their
# tests took in the unpatched run, longest first.
SLOW_FILES = ("tests/test_calibrate.py", "tests/test_engine.py", "tests/test_native_safety.py", "tests/test_app.py")


@dataclass(frozen=True)
class Mutation:
    name: str
    why: str    # the behaviour that breaks
    path: str   # the demo/ or lab/ module patched
    old: str    # anchor text, must occur exactly once
    new: str
    tests: tuple[str, ...]


MUTATIONS = [
    Mutation(
        "free drafting: rejected KV rows left visible",
        "the own loop keeps rejected guesses' rows in the attention, so every later token reads them",
        "demo/engine/verify_loop/main_model.py",
        "        self.mask[len(self.mask) - drop:] = 0",
        "        self.mask[len(self.mask) - drop:] = 1",
        ("tests/test_verify_loop.py::test_rejected_rows_are_masked_out_of_the_attention", "tests/test_verify_loop.py::test_exact_mode_gives_openvino_genais_plain_greedy_tokens"),
    ),
    Mutation(
        "free drafting: a wrong guess kept",
        "greedy acceptance keeps a guess the main model disagreed with",
        "demo/engine/verify_loop/loop.py",
        "            if own != guess:",
        "            if own != guess and False:",
        ("tests/test_verify_loop.py::test_greedy_acceptance_keeps_the_agreeing_prefix_and_the_main_models_token",
         "tests/test_verify_loop.py::test_exact_mode_gives_openvino_genais_plain_greedy_tokens"),
    ),
    Mutation(
        "free drafting: the gate drafts whatever it costs",
        "the gate's margin against one token alone is dropped, so steep verifies draft at a loss",
        "demo/engine/verify_loop/gate.py",
        "        if best.width != 1 and self.width == 1 and best.predicted_rate < plain * self.margin * self.shortfall():",
        "        if False:",
        ("tests/test_verify_loop.py::test_gate_learns_geometric_acceptance_and_stops_drafting_a_kind_that_fails",),
    ),
    Mutation(
        "free drafting: the gate blind to a change of width",
        "a step of another width than the last is planned at its steady cost",
        "demo/engine/verify_loop/gate.py",
        "        return self.costs[width - 1] + (self.switch_s if width != self.width else 0.0)",
        "        return self.costs[width - 1]",
        ("tests/test_verify_loop.py::test_the_gate_holds_a_width_while_a_change_would_cost_more_than_it_buys",),
    ),
    Mutation(
        "free drafting: rejected guesses never counted",
        "the gate counts only accepted guesses as tried, so every kind looks always right",
        "demo/engine/verify_loop/gate.py",
        "accepted + (1 if accepted < verified else 0)",
        "accepted + 0",
        ("tests/test_verify_loop.py::test_gate_learns_geometric_acceptance_and_stops_drafting_a_kind_that_fails",),
    ),
    Mutation(
        "free drafting: the outcome never checked",
        "the gate trusts its model even when its wider steps really lose to one token alone",
        "demo/engine/verify_loop/gate.py",
        "        return max(1.0, (1.0 / self.costs[0]) / (self.wide_tokens / self.wide_s))",
        "        return 1.0",
        ("tests/test_verify_loop.py::test_the_gate_stops_drafting_when_wider_steps_really_fall_short_of_one_token",),
    ),
    Mutation(
        "free drafting: a Stop unheard",
        "the own loop runs on after a visitor's Stop until the page's callback says so",
        "demo/engine/verify_loop/runner.py",
        "            if not on_chunk(chunk) or (stop is not None and stop.is_set()):",
        "            if not on_chunk(chunk):",
        ("tests/test_verify_loop.py::test_a_stop_ends_the_own_loop_within_a_step",),
    ),
    Mutation(
        "free drafting: the prefill's logits read from its first row",
        "the first token follows the prompt's first token instead of its last",
        "demo/engine/verify_loop/main_model.py",
        "        return self._infer(ids, np.array([len(ids) - 1], dtype=np.int64))[0]",
        "        return self._infer(ids, np.array([0], dtype=np.int64))[0]",
        ("tests/test_verify_loop.py::test_exact_mode_gives_openvino_genais_plain_greedy_tokens",),
    ),
    Mutation(
        "free drafting: n-grams match the sequence's own suffix",
        "the n-gram drafter indexes the last n-gram before proposing, so it proposes its own (empty) continuation",
        "demo/engine/verify_loop/ngram.py",
        "        for end in range(max(self.indexed, 1), len(self.seq)):",
        "        for end in range(max(self.indexed, 1), len(self.seq) + 1):",
        ("tests/test_verify_loop.py::test_ngram_proposer_matches_brute_force_as_the_sequence_grows",),
    ),
    Mutation(
        "free drafting: recycled predictions keyed by the token alone",
        "the recycled drafter forgets the pair of tokens a prediction followed",
        "demo/engine/verify_loop/recycled.py",
        "        if a is not None and (a, b) in self.after_pair:",
        "        if False:",
        ("tests/test_verify_loop.py::test_recycled_proposer_chains_the_main_models_own_predictions",),
    ),
    Mutation(
        "free drafting: datastore windows matched by hash alone",
        "hash collisions in the datastore index are kept as matches",
        "demo/models/code_datastore.py",
        "        return found[ok]",
        "        return found",
        ("tests/test_verify_loop.py::test_datastore_windows_whose_hashes_collide_are_not_matches",),
    ),
    Mutation(
        "free drafting: the datastore follows the rarest continuation",
        "the datastore drafter takes the continuation fewest occurrences share",
        "demo/engine/verify_loop/datastore.py",
        "            best = int(np.argmax(counts))",
        "            best = int(np.argmin(counts))",
        ("tests/test_verify_loop.py::test_datastore_proposer_takes_the_continuation_most_occurrences_share_and_says_how_sure",),
    ),
    Mutation(
        "fused projections: the biases stacked in reverse",
        "q/k/v merged into one matmul add each other's bias vectors, so every answer of an int4_sym model changes",
        "demo/models/fused_projections.py",
        "            bias = ops.constant(np.concatenate([c.get_data().reshape(-1) for _, c, _ in biases]))",
        "            bias = ops.constant(np.concatenate([c.get_data().reshape(-1) for _, c, _ in biases][::-1]))",
        ("tests/test_fused_projections.py::test_projections_reading_one_input_become_one_matmul_each_group_with_the_same_outputs",),
    ),
    Mutation(
        "fused projections: the columns handed out in the wrong order",
        "after the merged matmul, each former projection gets another one's columns",
        "demo/models/fused_projections.py",
        "ops.constant(np.array(rows, dtype=np.int64)))",
        "ops.constant(np.array(rows[::-1], dtype=np.int64)))",
        ("tests/test_fused_projections.py::test_projections_reading_one_input_become_one_matmul_each_group_with_the_same_outputs",),
    ),
    Mutation(
        "fused projections: zero points stacked in reverse",
        "merged int4_asym weights subtract each other's zero points, so their columns come out wrong",
        "demo/models/fused_projections.py",
        "_stack([w.zero_point for w in weights])",
        "_stack([w.zero_point for w in weights][::-1])",
        ("tests/test_fused_projections.py::test_weights_with_zero_points_merge_with_their_zero_points",),
    ),
    Mutation(
        "fused projections: the sizes asked for ignored",
        "an experiment asking for q/k/v only gets every group merged, so its comparison measures nothing",
        "demo/models/fused_projections.py",
        "if sizes is None or len(g) in sizes]",
        "if True]",
        ("tests/test_fused_projections.py::test_only_groups_of_the_sizes_asked_for_are_merged",),
    ),
    Mutation(
        "quiet log: one stream for every thread",
        "a conversion is printed as done when a check begins in another thread, before its 100% line",
        "demo/core/quiet_log.py",
        '    return (head if sep and " " not in head else ""), threading.get_ident()',
        '    return (head if sep and " " not in head else ""), 0',
        ("tests/test_native_safety.py::test_a_task_is_not_called_done_because_another_thread_began_one",),
    ),
    Mutation(
        "precision: a win read from the median round",
        "the plugin's default replaces f32 on a median win, so a launch's drift picks bf16",
        "demo/calibrate/precision.py",
        "        return max(ratios) < 1 - TIE",
        "        return median(ratios) < 1 - TIE",
        ("tests/test_precision.py::test_the_default_is_chosen_only_where_it_is_faster_even_in_its_worst_round",),
    ),
    Mutation(
        "precision: the app's pipelines ignore the calibrated precision",
        "every CPU constructor is told f32 whatever calibration chose",
        "demo/core/placement.py",
        "        props[PRECISION_HINT] = cpu_precision(options)",
        '        props[PRECISION_HINT] = "f32"',
        ("tests/test_precision.py::test_every_cpu_constructor_gets_the_chosen_precision_and_exact_mode_keeps_f32",
         "tests/test_precision.py::test_a_race_runs_at_the_precision_calibration_chose"),
    ),
    Mutation(
        "beside: the baseline timed after the speculative pipeline",
        "race mode's baseline runs only once the speculative side's timing is over, so neither is timed as a race",
        "demo/calibrate/beside.py",
        "    thread.start()\n    try:\n        result = timed()\n    finally:",
        "    try:\n        result = timed()\n    finally:\n        thread.start()",
        ("tests/test_calibrate.py::test_the_race_baseline_decodes_beside_the_speculative_timing_and_stops_with_it",),
    ),
    Mutation(
        "calibration: race mode timed in a child at launch",
        "a launch times race mode in a stage child, so the app loads the chosen race pair again before Ready",
        "demo/calibrate/calibration.py",
        '    if mode == "race" and s.race_pair is not None:',
        "    if False:",
        ("tests/test_calibrate.py::test_race_mode_is_timed_on_the_apps_own_pipelines_which_stay_loaded",),
    ),
    Mutation(
        "placement: the stateful baseline keeps the sampler threads",
        "a baseline calibrated onto the stateful backend is given the scheduler's sampler property too",
        "demo/core/placement.py",
        '    return {**properties_for(device, options), "ATTENTION_BACKEND": "SDPA"}',
        '    return {**properties_for(device, options), **SAMPLER_PROPERTIES, "ATTENTION_BACKEND": "SDPA"}',
        ("tests/test_fairness.py::test_a_baseline_calibrated_onto_the_stateful_backend_gets_sdpa_and_no_scheduler",),
    ),
    Mutation(
        "placement: exact mode on two backends",
        "exact mode's baseline runs the stateful backend while the speculative side runs paged attention",
        "demo/core/placement.py",
        '        kind(options.main_device) == "CPU" and options.baseline_attention == "SDPA" and not options.exact)',
        '        kind(options.main_device) == "CPU" and options.baseline_attention == "SDPA")',
        ("tests/test_fairness.py::test_a_baseline_calibrated_onto_the_stateful_backend_gets_sdpa_and_no_scheduler",),
    ),
    Mutation(
        "arena: the calibrated backend ignored",
        "a fair request's baseline stays on paged attention where calibration measured SDPA fastest",
        "demo/engine/arena.py",
        "            options = options.with_baseline_attention(calibrated_baseline_attention(self.store, preset, request.mode))",
        "            options = options.with_baseline_attention(\"PA\")",
        ("tests/test_calibrate.py::test_a_fair_baseline_measured_fastest_on_the_stateful_backend_runs_there",),
    ),
    Mutation(
        "headline: the fastest plain is the slowest",
        "the speculative side is read against the slower plain configuration of each sample",
        "lab/paired.py",
        "            best = max(rates, key=rates.get)",
        "            best = min(rates, key=rates.get)",
        ("tests/test_headline.py::test_against_the_fastest_plain_engine_of_each_sample",),
    ),
    Mutation(
        "cost model: the stateful backend on any gain",
        "the baseline moves to the stateful backend when it was faster in one pair, not by the margin in every pair",
        "demo/calibrate/cost_model.py",
        "    if ratios and min(ratios) >= 1 + STATEFUL_MARGIN:",
        "    if ratios and max(ratios) >= 1:",
        ("tests/test_calibrate.py::test_the_stateful_backend_runs_the_baseline_only_when_clearly_faster_in_every_pair",),
    ),
    Mutation(
        "calibration: race baseline from the wrong pair",
        "the race baseline's rate is not the one it ran at beside the chosen pair",
        "demo/calibrate/calibration.py",
        '        rates = overheads[mode].get("baseline_rates") or plain[mode]["rates"][key]',
        '        rates = overheads[mode].get("baseline_rates", [1.0]) if mode == "fair" else [1.0]',
        ("tests/test_calibrate.py::test_the_fastest_main_alone_is_the_fastest_measured",),
    ),
    Mutation(
        "cost model: every format timed with race threads",
        "a format far behind the fastest with the whole machine is timed alone with race threads all the same",
        "demo/calibrate/cost_model.py",
        "medians[f] * RACE_MARGIN >= fastest]",
        "medians[f] * RACE_MARGIN >= 0]",
        ("tests/test_calibrate.py::test_a_main_far_behind_with_the_whole_machine_is_not_timed_alone_with_race_threads",),
    ),
    Mutation(
        "isolation: background work niced only itself",
        "a background child's session (its autogroup) is not niced, so under autogroups it takes a core from a race",
        "demo/core/isolation.py",
        "            f.write(str(nice))",
        "            pass",
        ("tests/test_native_safety.py::test_background_work_yields_to_the_app_in_its_own_session_too",),
    ),
    Mutation(
        "startup: converting waits for the warm pair",
        "the launch's early conversion starts only once the default pair is warm, as before stop 43",
        "demo/engine/startup.py",
        "    try:\n        calibrator.convert_early(preset, arena.store,",
        "    while not arena.startup.view().warm:\n        if stop.wait(1.0):\n            return\n"
        "    try:\n        calibrator.convert_early(preset, arena.store,",
        ("tests/test_calibrate.py::test_a_launch_starts_converting_before_the_pair_is_warm",),
    ),
    Mutation(
        "gguf unpack: a chunk overwrites the first",
        "every chunk of a weight's blocks is written to the start of its f16 value",
        "demo/models/gguf_unpack.py",
        "            request.set_output_tensor(ov.Tensor(result[a:b], shared_memory=True))",
        "            request.set_output_tensor(ov.Tensor(result[:b - a], shared_memory=True))",
        ("tests/test_formats.py::test_the_fast_unpacking_equals_the_cpu_plugins_evaluation_of_the_readers_subgraph_bit_for_bit",),
    ),
    Mutation(
        "gguf unpack: zero points ignored",
        "the block layout's zero points are left out of the f16 value",
        "demo/models/gguf_unpack.py",
        "            if zero is not None:\n                inputs[\"zero\"] = zero[a:b]",
        "            if zero is not None:\n                inputs[\"zero\"] = np.zeros_like(zero[a:b])",
        ("tests/test_formats.py::test_the_fast_unpacking_equals_the_cpu_plugins_evaluation_of_the_readers_subgraph_bit_for_bit",),
    ),
    Mutation(
        "bench: --tree checked against a chain",
        "the bench's K list is checked without the tree, so a K shallower than the tree starts loading models",
        "demo/bench/measure.py",
        "        b, d = self.tree if self.tree is not None and method == \"eagle3\" else (None, None)",
        "        b, d = (None, None)",
        ("tests/test_eagle3.py::test_the_bench_measures_an_eagle3_tree_and_refuses_one_without_a_head",),
    ),
    Mutation(
        "race tab: the tree sliders are ignored",
        "the page's branching factor and depth never reach OpenVINO: an EAGLE-3 tree races as a chain",
        "demo/web/race_tab.py",
        '        tree_depth=checks.number("tree depth", tree_depth, 0, MAX_TREE, integer=True) or None,',
        "        tree_depth=None,",
        ("tests/test_eagle3.py::test_the_pages_tree_sliders_race_a_tree_of_guesses",),
    ),
    Mutation(
        "render: no HTML escaping",
        "model output reaches the page as HTML (<script> would run)",
        "demo/web/render.py",
        "    return html.escape(str(value), quote=True)",
        "    return str(value)",
        ("tests/test_render.py",),
    ),
    Mutation(
        "race: sides run one after the other",
        "the race is sequential, so one panel waits for the other",
        "demo/engine/race.py",
        '        workers.start(f"race-{s}", lambda r=runners[s], p=mine: run_side(r, p, settings, stop, events.put))',
        '        run_side(runners[s], mine, settings, stop, events.put)',
        ("tests/test_race_logic.py::test_race_runs_both_sides_at_once",),
    ),
    Mutation(
        "streaming: accepted count off by one (pure)",
        "Chunk.accepted counts the main model's own token as accepted",
        "demo/core/streaming.py",
        "        return len(self.token_ids) - 1 if self.side == SPECULATIVE else 0",
        "        return len(self.token_ids) if self.side == SPECULATIVE else 0",
        ("tests/test_render.py::test_speculative_marks_match_accepted_tokens",),
    ),
    Mutation(
        "streaming: accepted count off by one (vs OpenVINO)",
        "the same, caught by comparing with OpenVINO's own accepted count on a real run",
        "demo/core/streaming.py",
        "        return len(self.token_ids) - 1 if self.side == SPECULATIVE else 0",
        "        return len(self.token_ids) if self.side == SPECULATIVE else 0",
        ("tests/test_engine.py::test_race_streams_both_sides_and_groups_chunks_by_step",),
    ),
    Mutation(
        "race: speculative side ignores Stop",
        "after Stop the speculative pipeline keeps generating",
        "demo/engine/race.py",
        "        return not stop.is_set()",
        "        return runner.side == \"speculative\" or not stop.is_set()",
        ("tests/test_race_logic.py::test_stop_cancels_both_sides_within_one_step",),
    ),
    Mutation(
        "pipelines: the streamer never cancels generate()",
        "Stop reaches the runner, but OpenVINO generates to the end",
        "demo/engine/openvino_runner.py",
        "                if not keep_going:\n                    result.cancelled = True\n"
        "                    return ov.StreamingStatus.CANCEL",
        "                if not keep_going:\n                    result.cancelled = True\n"
        "                    return ov.StreamingStatus.RUNNING",
        ("tests/test_engine.py::test_cancel_stops_both_within_two_steps_and_next_run_works",),
    ),
    Mutation(
        "race: closing the stream does not stop the sides",
        "Stop or a closed tab leaves both pipelines generating",
        "demo/engine/race.py",
        "        if pending:\n            stop.set()\n\n\n_END = object()",
        "        if pending:\n            pass\n\n\n_END = object()",
        ("tests/test_race_logic.py::test_closing_the_stream_returns_at_once_and_the_threads_end_by_themselves",),
    ),
    Mutation(
        "race: closing the stream waits for the workers",
        "closing joins the threads on the server's event loop, freezing every visitor",
        "demo/engine/race.py",
        "        if pending:\n            stop.set()\n\n\n_END = object()",
        "        if pending:\n            stop.set()\n"
        "            for t in threading.enumerate():\n"
        "                if t.name.startswith('race-'):\n"
        "                    t.join()\n\n\n_END = object()",
        ("tests/test_race_logic.py::test_closing_the_stream_returns_at_once_and_the_threads_end_by_themselves",),
    ),
    Mutation(
        "race: a side's clock starts with its thread",
        "time spent waiting for a pipeline a stopped run still holds counts against a side",
        "demo/engine/race.py",
        "            result = runner.run(prompt, settings, on_chunk, on_start, stop=stop)",
        "            on_start(time.perf_counter())\n"
        "            result = runner.run(prompt, settings, on_chunk, lambda t: None, stop=stop)",
        ("tests/test_race_logic.py::test_start_event_comes_from_the_runner_not_from_the_thread_start",),
    ),
    Mutation(
        "render: accepted guesses lose their highlight",
        "the accepted span is empty, so the page hides what speculation bought",
        "demo/web/render.py",
        '    acc = c.accepted_text if c.text.startswith(c.accepted_text) else ""',
        '    acc = ""',
        ("tests/test_render.py",),
    ),
    Mutation(
        "race: replay ignores the speed",
        "a replay at 2x plays at 1x",
        "demo/engine/race.py",
        "        wait = offset / speed - (clock() - t0)",
        "        wait = offset - (clock() - t0)",
        ("tests/test_race_logic.py::test_replay_keeps_each_sides_pace_and_merges_by_offset",),
    ),
    Mutation(
        "metrics: verdict ignores a divergence",
        "two different outputs are reported identical",
        "demo/core/metrics.py",
        "        if a != b:\n            return",
        "        if a != b and False:\n            return",
        ("tests/test_race_logic.py::test_acceptance_rate_and_verdicts",),
    ),
    Mutation(
        "calibrate: the draft's guesses shifted by one position",
        "acceptance would be counted against the wrong answer token, so τ(K) and the choice go wrong",
        "demo/calibrate/measure.py",
        "    return [int(x) for x in logits[0, len(prompt_ids) - 1:].argmax(-1)]",
        "    return [int(x) for x in logits[0, len(prompt_ids):].argmax(-1)] + [-1]",
        ("tests/test_calibrate.py::test_a_format_agrees_with_itself_and_not_with_a_different_model",),
    ),
    Mutation(
        "calibrate: a step keeps every guess up to K, right or wrong",
        "τ(K) would grow with K regardless of acceptance, so calibration would always pick the largest K",
        "demo/calibrate/cost_model.py",
        "        p += min(runs[p], k) + 1",
        "        p += k + 1",
        ("tests/test_calibrate.py::test_agreement_runs_and_steps_by_hand",),
    ),
    Mutation(
        "calibrate: the real pipeline's overhead is left out of the prediction",
        "the model would favour small K and fast-stepping formats again (K=1 at 0.77× the best on a Zen 4)",
        "demo/core/acceptance.py",
        "else max(0.0, self.per_step_s + self.per_guess_s * k)",
        "else 0.0",
        ("tests/test_calibrate.py::test_prediction_with_overhead_by_hand",),
    ),
    Mutation(
        "calibrate: the fitted overhead line is anchored at K=0 by the first K's excess alone",
        "every step would carry the per-guess cost of the first K once more",
        "demo/calibrate/cost_model.py",
        "    return extra0 - per_guess * k0, per_guess",
        "    return extra0, per_guess",
        ("tests/test_calibrate.py::test_prediction_with_overhead_by_hand",),
    ),
    Mutation(
        "calibrate: a K timed in the real pipeline is predicted from the line anyway",
        "K=1, whose real step sits 20 % below the line through K=2 and 6, would read 25 % slow again",
        "demo/core/acceptance.py",
        "        extra = timed[k] if k in timed else",
        "        extra = timed[k] if False else",
        ("tests/test_calibrate.py::test_prediction_with_overhead_by_hand",
         "tests/test_acceptance.py::test_the_step_view_keeps_the_step_a_real_pipeline_measured_at_its_k"),
    ),
    Mutation(
        "calibrate: one paired sample at least as fast makes a tie with the fastest plain configuration",
        "a launch's two samples read int4_sym 0.60x and 1.04x int4_channel, and the page raced against the slower one",
        "demo/calibrate/cost_model.py",
        "    return bool(ratios) and median(ratios) >= 1 - TIE_MARGIN",
        "    return bool(ratios) and (median(ratios) >= 1 - TIE_MARGIN or max(ratios) >= 1)",
        ("tests/test_calibrate.py::test_plain_choice_ties_by_paired_samples",),
    ),
    Mutation(
        "calibrate: a K timed in the real pipeline below the bare model's step is predicted at the bare step",
        "a launch whose bare costs read high would pass over the K it timed fastest (K=2 at 31.4 tok/s read as 26.6)",
        "demo/core/acceptance.py",
        "        extra = timed[k] if k in timed else",
        "        extra = max(0.0, timed[k]) if k in timed else",
        ("tests/test_calibrate.py::test_prediction_with_overhead_by_hand",
         "tests/test_calibrate.py::test_a_zen4_launch_whose_bare_costs_read_high_is_predicted_at_its_real_pipelines_steps"),
    ),
    Mutation(
        "pipelines: an evicted side is kept alive",
        "fair mode on a pair that fits one side at a time would hold both pipelines anyway",
        "demo/engine/pipelines.py",
        "        runners.clear()\n        del runners",
        "        self.__dict__.setdefault('kept', []).append(dict(runners))\n"
        "        runners.clear()\n        del runners",
        ("tests/test_engine.py::test_fair_mode_loads_one_side_at_a_time_when_both_do_not_fit",),
    ),
    Mutation(
        "race: fair mode always runs the baseline first",
        "a pair loaded in turn would load both sides for every fair run, not one",
        "demo/engine/race.py",
        "    order = sorted(SIDES, key=lambda side: not loaded(side))",
        "    order = SIDES",
        ("tests/test_engine.py::test_fair_mode_loads_one_side_at_a_time_when_both_do_not_fit",),
    ),
    Mutation(
        "metrics: speedup's arguments swapped",
        "the page shows baseline ÷ speculative as the speedup",
        "demo/core/metrics.py",
        "    return speculative.tokens_per_s / baseline.tokens_per_s",
        "    return baseline.tokens_per_s / speculative.tokens_per_s",
        ("tests/test_race_logic.py::test_one_comparison_by_hand",),
    ),
    Mutation(
        "pipelines: baseline without the shared scheduler",
        "the baseline gets OpenVINO's default scheduler (prefix cache on), the speculative side does not",
        "demo/engine/pipelines.py",
        "            pipes[BASELINE] = ov.LLMPipeline(key.main_of(BASELINE), o.main_device, **baseline_props)",
        "            pipes[BASELINE] = ov.LLMPipeline(key.main_of(BASELINE), o.main_device,\n"
        "                                             **{k: v for k, v in baseline_props.items() if k != 'scheduler_config'})",
        ("tests/test_fairness.py::test_a_cpu_race_splits_the_cores_and_builds_both_sides_from_equal_schedulers",),
    ),
    Mutation(
        "placement: thread count dropped",
        "racing pipelines get OpenVINO's default threads and oversubscribe the cores",
        "demo/core/placement.py",
        '        props.update({"INFERENCE_NUM_THREADS": options.threads, "ENABLE_CPU_PINNING": False})',
        '        props.update({"ENABLE_CPU_PINNING": False})',
        ("tests/test_fairness.py::test_a_cpu_race_splits_the_cores_and_builds_both_sides_from_equal_schedulers",),
    ),
    Mutation(
        "placement: one exact-mode property dropped",
        "exact mode no longer guarantees equal greedy outputs",
        "demo/core/placement.py",
        '    "KV_CACHE_PRECISION": "f32",\n',
        "",
        ("tests/test_fairness.py::test_exact_mode_reaches_both_pipelines_and_the_draft",),
    ),
    Mutation(
        "placement: CPU properties sent to a GPU side",
        "a draft on the GPU is told CPU threads and pinning",
        "demo/core/placement.py",
        '    if k == "CPU" and options.threads is not None:',
        "    if options.threads is not None:",
        ("tests/test_fairness.py::test_a_gpu_draft_gets_no_cpu_properties_and_the_cpu_is_split_between_the_two_mains",),
    ),
    Mutation(
        "arena: the race's thread choice ignores a recorded crash",
        "a race compiles a configuration that crashed OpenVINO here, and the app dies",
        "demo/engine/arena.py",
        "            if not unusable:\n                return n",
        "            if True:\n                return n",
        ("tests/test_native_safety.py::test_a_race_survives_a_crashing_thread_count_and_a_restart_never_tries_it_again",),
    ),
    Mutation(
        "calibration: stages are not told what crashed",
        "calibration compiles the crashing configuration again after each crash",
        "demo/calibrate/stages.py",
        '{**args, "unusable": self.unusable()}',
        '{**args, "unusable": []}',
        ("tests/test_native_safety.py::test_calibration_skips_a_crashing_format_and_resumes_after_an_interruption",),
    ),
    Mutation(
        "calibration: finished stages are not reused",
        "a restart mid-calibration measures everything again",
        "demo/calibrate/stages.py",
        "        if name in self.done:",
        "        if False:",
        ("tests/test_native_safety.py::test_calibration_skips_a_crashing_format_and_resumes_after_an_interruption",),
    ),
    Mutation(
        "quiet log: repeated lines printed",
        "a Space's log repeats the same progress line hundreds of times",
        "demo/core/quiet_log.py",
        '            if message == state["last"] or (now - state["printed"] < self.interval_s and not finished):',
        '            if now - state["printed"] < self.interval_s and not finished:',
        ("tests/test_native_safety.py::test_the_log_prints_progress_sparingly_and_each_tasks_duration",),
    ),
    Mutation(
        "quiet log: two tasks taking turns reprint their lines",
        "a task waiting on another's prepare and that prepare print the same two lines over and over",
        "demo/core/quiet_log.py",
        '                    and now - state["printed"] >= self.repeat_s and self._open.get(stream) != task):',
        '                    and self._open.get(stream) != task):',
        ("tests/test_native_safety.py::test_the_log_prints_progress_sparingly_and_each_tasks_duration",),
    ),
    Mutation(
        "quiet log: a step's repeated line while it runs is a new step",
        "each conversion printed twice, once after its own 'done in'",
        "demo/core/quiet_log.py",
        '                    and now - state["printed"] >= self.repeat_s and self._open.get(stream) != task):',
        '                    and now - state["printed"] >= self.repeat_s):',
        ("tests/test_native_safety.py::test_a_step_saying_its_line_again_while_it_runs_is_one_step",),
    ),
    Mutation(
        "launch: a converted format's check runs during a measuring stage",
        "a model loads and runs beside the confirmation's timing and skews what it reads",
        "demo/engine/startup.py",
        "        with quiet or contextlib.nullcontext():\n            arena.guard.check_all(",
        "        if True:\n            arena.guard.check_all(",
        ("tests/test_profiles.py::test_each_early_converted_format_is_proved_on_this_cpu_as_it_lands",),
    ),
    Mutation(
        "launch: the draft's format converted before the main's others",
        "the speculative side's main lands after the confirmation and holds Ready back",
        "demo/calibrate/launch.py",
        """        line = ([("main", f) for f in first] + [("main", f) for f in plan["main_formats"] if f not in first]
                + [("draft", f) for f in plan["draft_formats"]])""",
        """        line = ([("main", f) for f in first] + [("draft", f) for f in plan["draft_formats"]]
                + [("main", f) for f in plan["main_formats"] if f not in first])""",
        ("tests/test_profiles.py::test_with_a_profile_the_main_s_formats_convert_first_and_the_draft_s_last",),
    ),
    Mutation(
        "numbers: a baseline on the other attention backend passes for the fastest",
        "the summary stays silent when the baseline reads the fastest weights on the slower backend",
        "demo/engine/calibration_words.py",
        "    runs = plain_key(pair.baseline_main_format, attention)",
        "    runs = plain_key(pair.baseline_main_format, fastest.attention)",
        ("tests/test_honest_baseline.py::test_a_baseline_that_is_not_the_fastest_alone_is_said_so_in_one_sentence",),
    ),
    Mutation(
        "numbers: the summary without the baseline's caveat",
        "an exact-mode race reads its speedup against a slower baseline and nothing says so",
        "demo/engine/arena.py",
        "                          baseline_note=self.baseline_caveat(request, pair) if pair is not None else None,",
        "                          baseline_note=None,",
        ("tests/test_honest_baseline.py::test_a_fair_race_runs_its_baseline_on_the_fastest_plain_format",),
    ),
    Mutation(
        "numbers: the CLI names the speculative main as the baseline's",
        "the CLI says the baseline ran int4_sym when it ran int4_channel",
        "demo/engine/request.py",
        '    base_main = formats.get("baseline") or formats.get("main")',
        '    base_main = formats.get("main")',
        ("tests/test_cli.py::test_each_side_s_configuration_in_words",),
    ),
    Mutation(
        "numbers: the headline takes a calibration prompt",
        "a headline figure measured on the prompts calibration chose on flatters its choice",
        "demo/core/bench_prompts.py",
        "    seen = [p.id for p in prompts if p.id in CALIBRATION_SET]",
        "    seen = []",
        ("tests/test_headline.py::test_the_headline_never_reports_on_a_prompt_calibration_tunes_on",),
    ),
    Mutation(
        "numbers: a recording forgets the baseline's own main",
        "a screenshot's caption says 'diverged' without saying the two sides read different weights",
        "demo/records/outcomes.py",
        "            baseline_format=pair.baseline_format if pair is not None and pair.baseline is not None else None)",
        "            baseline_format=None)",
        ("tests/test_recording.py::test_outcome_records_finished_races_only",),
    ),
    Mutation(
        "numbers: the glance line without the verdict",
        "a booth visitor reads the speedup without whether the two texts match",
        "demo/web/render.py",
        "                  f'({summary.speculative.tokens_per_s:.1f} vs {summary.baseline.tokens_per_s:.1f} tok/s), ' + glance)",
        "                  f'({summary.speculative.tokens_per_s:.1f} vs {summary.baseline.tokens_per_s:.1f} tok/s)')",
        ("tests/test_metric_definitions.py::test_the_result_reads_at_a_glance_and_the_measuring_details_are_behind_a_fold",),
    ),
    Mutation(
        "profiles: a median bar instead of the sign test's bound",
        "a near tie on a noisy box sends every other launch to measuring whole",
        "demo/calibrate/profile.py",
        "                  confirmed=bool(ratios) and median_upper_bound(ratios) >= CONFIRM_BAR)",
        "                  confirmed=bool(ratios) and median(ratios) >= CONFIRM_BAR)",
        ("tests/test_profiles.py::test_a_profile_is_set_aside_only_when_the_runner_up_was_faster_in_seven_pairs_of_eight",),
    ),
    Mutation(
        "profiles: the shipped profile not checked against its calibration",
        "a profile edited by hand, or its JSON changed, goes unnoticed",
        "demo/calibrate/profile.py",
        '            "decisions": decisions(result), "calibration": record}',
        '            "decisions": decisions(result), "calibration": {**record, "k_max": 99}}',
        ("tests/test_profiles.py::test_every_shipped_profile_is_the_calibration_json_it_names",),
    ),
    Mutation(
        "quiet log: one stream for every prefix",
        "a calibration line ends the pair's warm-up, so the log times the wrong step",
        "demo/core/quiet_log.py",
        '    return (head if sep and " " not in head else ""), threading.get_ident()',
        '    return "", threading.get_ident()',
        ("tests/test_native_safety.py::test_the_log_times_each_stream_on_its_own",),
    ),
    Mutation(
        "pipelines: the in-turn decision is taken again after the sides loaded",
        "the page stops saying a fair race loaded its sides one at a time once their measured sizes differ",
        "demo/engine/pipelines.py",
        "        if key in self._in_turn:\n            return True\n",
        "",
        ("tests/test_engine.py::test_a_pair_found_to_load_in_turn_stays_so_whatever_its_sides_measure",),
    ),
    Mutation(
        "metrics: a failed side still gets a speedup",
        "a race where one side crashed shows a speedup computed from half a run",
        "demo/core/metrics.py",
        "speedup=None if failed else speedup(b, s)",
        "speedup=speedup(b, s)",
        ("tests/test_race_logic.py::test_one_comparison_by_hand",),
    ),
    Mutation(
        "chat: one history for both sides",
        "the speculative side is sent the baseline's earlier answers, so its turns are not its own",
        "demo/engine/chat.py",
        '{"role": "assistant", "content": turn.answer(side)}',
        '{"role": "assistant", "content": turn.answer("baseline")}',
        ("tests/test_chat.py::test_each_side_is_sent_its_own_history_of_the_same_user_turns",),
    ),
    Mutation(
        "chat: no bound on turns",
        "a visitor's conversation grows without end",
        "demo/engine/chat.py",
        "if len(self.turns) >= MAX_TURNS:",
        "if False:",
        ("tests/test_chat.py::test_a_chat_is_full_after_max_turns_and_says_so",),
    ),
    Mutation(
        "race: one prompt for both sides of a chat turn",
        "race() ignores the per-side prompts, so both sides get the baseline's history",
        "demo/engine/race.py",
        "mine = prompt[s] if isinstance(prompt, dict) else prompt",
        'mine = prompt["baseline"] if isinstance(prompt, dict) else prompt',
        ("tests/test_chat.py::test_each_side_is_sent_its_own_history_of_the_same_user_turns",),
    ),
    Mutation(
        "csv: a separator inside a cell starts no new cell",
        "`x;=cmd|…` opened with `;` as the delimiter runs a formula on the operator's laptop",
        "demo/records/csv_export.py",
        "            cell_start, first = True, False\n",
        "            first = False\n",
        ("tests/test_scoreboard.py::test_csv_guard_defuses_every_place_a_formula_could_start",),
    ),
    Mutation(
        "csv: full-width forms read as they are",
        "a full-width ＝ (which NFKC makes =) gets through the CSV guard",
        "demo/records/csv_export.py",
        '    return unicodedata.normalize("NFKC", ch)[:1] or ch',
        "    return ch",
        ("tests/test_scoreboard.py::test_csv_guard_defuses_every_place_a_formula_could_start",),
    ),
    Mutation(
        "csv: the page's export keeps the prompt column",
        "any visitor downloads every prompt kept with --keep-prompts",
        "demo/records/scoreboard.py",
        'return write_csv(db, COLUMNS, out, max_rows=PAGE_EXPORT_ROWS, drop=("prompt",))',
        "return write_csv(db, COLUMNS, out)",
        ("tests/test_scoreboard.py::test_the_page_export_holds_no_prompt_text_and_is_bounded",),
    ),
    Mutation(
        "scoreboard: standings by preset, prompt and method only",
        "50 races of one token, sampled or with K = 16 move the default configuration's median",
        "demo/records/scoreboard.py",
        "grouped.setdefault((*key, tokens == DEFAULT_MAX_NEW_TOKENS), []).append(float(s))",
        'grouped.setdefault((*key[:3], "race", 4, None, False, True), []).append(float(s))',
        ("tests/test_scoreboard.py::test_skewed_races_do_not_move_the_default_standing",),
    ),
    Mutation(
        "downloads: old files are never deleted",
        "every Export CSV click or benchmark leaves another file on disk",
        "demo/web/files.py",
        "            old = mine[:max(0, len(mine) + 1 - self.keep_each)]  # the owner's own, past keep_each",
        "            old = []  # the owner's own, past keep_each",
        ("tests/test_strangers_files.py::test_downloads_keep_at_most_keep_and_expire_by_age",),
    ),
    Mutation(
        "serve: the replica's journal keeps the prompt",
        "a visitor's prompt stays in every Serve replica without --keep-prompts",
        "demo/serve/worker.py",
        'entry = {"side": self.side, ',
        'entry = {"side": self.side, "prompt": request.prompt, ',
        ("tests/test_serve_units.py::test_a_replicas_journal_keeps_no_prompt_text",),
    ),
    Mutation(
        "race: a bug's text goes to the page",
        "an exception's name, message and paths reach the visitor",
        "demo/engine/race.py",
        'unexpected(f"the {runner.side} side", e)',
        'f"{type(e).__name__}: {e}"',
        ("tests/test_race_logic.py::test_unexpected_exception_is_reported_not_hung",),
    ),
    Mutation(
        "checks: a whole number goes through math.isfinite",
        "a raw POST of 10**400 gets Gradio's bare error (OverflowError) instead of the setting's sentence",
        "demo/web/checks.py",
        "    ok = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))",
        "    ok = isinstance(value, (int, float)) and math.isfinite(value)",
        ("tests/test_strangers_files.py::test_every_numeric_check_refuses_any_value_with_its_sentence",),
    ),
    Mutation(
        "bench: the JSON keeps model paths",
        "the Benchmark tab hands visitors the folders of this machine's models",
        "demo/bench/measure.py",
        '            "main": _model_by_name(preset.main.model_dump()),',
        '            "main": preset.main.model_dump(),',
        ("tests/test_bench.py::test_the_json_names_no_model_path_of_this_machine",),
    ),
    Mutation(
        "calibration: the largest speedup over its own main wins again",
        "a pair on a main that is slow alone is chosen for its big ratio, and the page races that slow main",
        "demo/calibrate/cost_model.py",
        '    return max(near, key=lambda c: (c["main_format"] in preferred_mains, c["speculative_tok_s"]))',
        '    return max(near, key=lambda c: (c["speculative_tok_s"] / c["baseline_tok_s"], c["speculative_tok_s"]))',
        ("tests/test_calibrate.py::test_among_equally_fast_the_one_on_the_fastest_plain_main_wins",),
    ),
    Mutation(
        "calibration: the slowest main alone is called the fastest",
        "plain_choice takes the minimum: the baseline runs the slowest format and the speedup swells",
        "demo/calibrate/cost_model.py",
        "    best = max(medians, key=medians.get)",
        "    best = min(medians, key=medians.get)",
        ("tests/test_calibrate.py::test_plain_choice_ties_by_paired_samples",),
    ),
    Mutation(
        "calibration: the mean instead of the median",
        "one disturbed run picks the main format the baseline runs",
        "demo/calibrate/cost_model.py",
        "    medians = {f: median(v) for f, v in rates.items() if v}",
        "    medians = {f: sum(v) / len(v) for f, v in rates.items() if v}",
        ("tests/test_calibrate.py::test_plain_choice_ties_by_paired_samples",),
    ),
    Mutation(
        "arena: the baseline runs the speculative side's main",
        "the fastest format without a draft is measured but never raced",
        "demo/engine/pipelines.py",
        "        return self.baseline_main if side == BASELINE and self.baseline_main else self.main",
        "        return self.main",
        ("tests/test_honest_baseline.py",),
    ),
    Mutation(
        "arena: exact mode races two different mains",
        "the equality proof compares different weights",
        "demo/engine/arena.py",
        "        if (fastest is not None and request.main_format is None and not request.options.exact",
        "        if (fastest is not None and request.main_format is None",
        ("tests/test_calibrate.py::test_fair_mode_runs_on_the_fair_choice_where_models_yaml_says_auto",),
    ),
    Mutation(
        "headline: the paired ratio inverted",
        "the headline prints baseline ÷ speculative",
        "lab/paired.py",
        '            out.append({"round": s["round"], "prompt": s["prompt"], "tokens": n, a: ra, b: rb, "ratio": ra / rb})',
        '            out.append({"round": s["round"], "prompt": s["prompt"], "tokens": n, a: ra, b: rb, "ratio": rb / ra})',
        ("tests/test_headline.py",),
    ),
    Mutation(
        "headline: rates over whole answers of different lengths",
        "the pair is not cut at the shorter answer",
        "lab/paired.py",
        '        n = min(len(s["times"][a]), len(s["times"][b]))',
        '        n = None',
        ("tests/test_headline.py",),
    ),
    Mutation(
        "startup: names the Arena again (a type-only import)",
        "the warm-up and the front door import each other again, the loop hidden under TYPE_CHECKING",
        "demo/engine/startup.py",
        "if TYPE_CHECKING:  # annotations only\n",
        "if TYPE_CHECKING:  # annotations only\n    from .arena import Arena\n",
        ("tests/test_layers.py::test_no_import_cycles_inside_a_layer_either",),
    ),
    Mutation(
        "batching: step aside only above the crossover",
        "a request that joins exactly at the measured crossover still drafts",
        "demo/engine/batching.py",
        "and self.crossover is not None and running >= self.crossover)",
        "and self.crossover is not None and running > self.crossover)",
        ("tests/test_batching.py::test_at_the_crossover_a_new_request_joins_the_plain_pipeline",),
    ),
    Mutation(
        "load: a tie counts as paying",
        "the crossover skips an N where speculation gains nothing",
        "demo/models/load_store.py",
        "        if speedup_by_n[n] <= 1.0:",
        "        if speedup_by_n[n] < 1.0:",
        ("tests/test_batching.py::test_the_crossover_is_the_smallest_n_that_stops_paying",),
    ),
    Mutation(
        "safety: an unproven configuration counts as usable",
        "the guard fails open: a Python error in the smoke test, or a record it could not write, and the app compiles it anyway",
        "demo/engine/native_guard.py",
        '        return self._failures.get(config.key) or f"{config.describe()} was not proven to run on this CPU"',
        "        return None",
        ("tests/test_stop_and_guard.py::test_a_python_error_in_the_smoke_test_leaves_the_configuration_unproven",),
    ),
    Mutation(
        "pipelines: the cache compiles without its guard",
        "a Serve replica compiles 1 thread per side on 2 cores, the known SIGFPE configuration, unproven",
        "demo/engine/pipelines.py",
        "            if self.guard is not None:  # every compile proven, whoever asks (race, fair, three-way, a replica)",
        "            if False:",
        ("tests/test_stop_and_guard.py::test_the_pipeline_cache_refuses_what_its_guard_did_not_prove",),
    ),
    Mutation(
        "child side: a Stop never ends a prefill",
        "a side inside its prompt runs on to its first token after the visitor pressed Stop, holding the CPU",
        "demo/engine/child_side.py",
        "            if cancelled_at is not None and not chunks and now - cancelled_at > self._stop_grace():",
        "            if False:",
        ("tests/test_child_side.py::test_a_stop_during_a_long_prefill_ends_both_sides_before_their_first_token",),
    ),
    Mutation(
        "race: the runner is not told of a Stop",
        "only a token can carry the Stop to a side, so a prefill is never cut",
        "demo/engine/race.py",
        "            result = runner.run(prompt, settings, on_chunk, on_start, stop=stop)",
        "            result = runner.run(prompt, settings, on_chunk, on_start)",
        ("tests/test_child_side.py::test_a_stop_in_a_long_prefill_through_the_page_frees_the_machine_for_the_next_visitor",),
    ),
    Mutation(
        "pipelines: a side whose child is gone is used again",
        "after a Stop in a prefill or a crash, every later race on that pair fails",
        "demo/engine/pipelines.py",
        "            if not getattr(runner, \"alive\", lambda: True)():",
        "            if False:",
        ("tests/test_child_side.py::test_a_side_that_crashes_ends_with_a_sentence_and_is_loaded_again",),
    ),
    Mutation(
        "child side: the child dies with the thread that loaded it",
        "PR_SET_PDEATHSIG follows the loading thread: the pipeline is killed when its request's thread ends",
        "demo/engine/child_side.py",
        "    out = os.fdopen(fd, \"w\", buffering=1)",
        "    isolation._die_with_parent(os.getppid())\n    out = os.fdopen(fd, \"w\", buffering=1)",
        ("tests/test_child_side.py::test_a_side_outlives_the_thread_that_loaded_it_and_ends_with_the_app",),
    ),
    Mutation(
        "race: a lane that loads after a Stop still runs",
        "a Stop while a lane's pipelines load is followed by its prefill, for nobody",
        "demo/engine/race.py",
        "        if stop.is_set():  # stopped before it began (while its pipeline loaded): no prefill for nobody",
        "        if False:",
        ("tests/test_stop_and_guard.py::test_a_stop_while_a_lane_loads_runs_no_lane_after_it",),
    ),
    Mutation(
        "bench report: the median is the mean",
        "one slow outlier moves the table's middle value",
        "demo/bench/report.py",
        '        "median": statistics.median(xs),',
        '        "median": statistics.fmean(xs),',
        ("tests/test_bench.py::test_the_report_middle_is_the_median_not_the_mean",),
    ),
    Mutation(
        "runner: OpenVINO applies the chat template again",
        "the already templated prompt is wrapped a second time",
        "demo/engine/openvino_runner.py",
        "    c.apply_chat_template = False  # applied by template()",
        "    c.apply_chat_template = True  # applied by template()",
        ("tests/test_fairness.py::test_openvino_does_not_apply_the_chat_template_a_second_time",),
    ),
    Mutation(
        "request: the precision wording is not from the properties",
        "the page says 'default precision' while every CPU constructor is given f32",
        "demo/engine/request.py",
        "    precision = placement.describe_built_with(options.with_threads(threads), method)",
        '    precision = "exact mode (f32)" if options.exact else "default precision"',
        ("tests/test_fairness.py::test_how_it_ran_states_what_every_constructor_was_given",),
    ),
    Mutation(
        "placement: f32 for the main model only",
        "the draft computes in the CPU's default precision while the page says f32 for both",
        "demo/core/placement.py",
        '    """The draft model\'s properties: its device\'s, and one sampler thread beside a scheduler."""\n'
        "    props = properties_for(device, options)",
        '    """The draft model\'s properties: its device\'s, and one sampler thread beside a scheduler."""\n'
        '    props = {k: v for k, v in properties_for(device, options).items() if k != "INFERENCE_PRECISION_HINT"}',
        ("tests/test_fairness.py::test_a_cpu_race_splits_the_cores_and_builds_both_sides_from_equal_schedulers",
         "tests/test_fairness.py::test_how_it_ran_states_what_every_constructor_was_given"),
    ),
    Mutation(
        "metrics: the acceptance rate from the chunk count",
        "the stream's accepted count (last step included) over OpenVINO's drafted (last step left out)",
        "demo/core/metrics.py",
        "                      acceptance_rate=acceptance_rate(accepted, drafted),",
        "                      acceptance_rate=acceptance_rate(s.accepted, drafted),",
        ("tests/test_metric_definitions.py::test_the_acceptance_rate_is_openvinos_accepted_over_drafted_and_the_page_says_so",),
    ),
    Mutation(
        "metrics: tokens per step count the prompt's step",
        "τ is diluted by the prompt's one-token step, unlike the curve's and the explanation's",
        "demo/core/metrics.py",
        "    return [len(c.token_ids) for c in chunks[1:]]",
        "    return [len(c.token_ids) for c in chunks]",
        ("tests/test_metric_definitions.py::test_tokens_per_step_is_the_same_number_in_the_summary_the_curve_and_the_explanation",),
    ),
    Mutation(
        "explain: the per-step cost includes the prompt's call",
        "a long prompt's prefill makes a verify step look dear and flips the regime sentence",
        "demo/core/explain.py",
        "    steps = list(per_step or [])[1:]",
        "    steps = list(per_step or [])",
        ("tests/test_metric_definitions.py::test_per_step_costs_leave_the_prompts_step_out",),
    ),
    Mutation(
        "explain: a confidence threshold has no guesses",
        "'Why this speedup?' says nothing of the guesses a threshold made (the old 'None guesses')",
        "demo/core/explain.py",
        "    per_step = k if k else (drafted / max(1, len(sizes) - 1) if drafted is not None and sizes else None)",
        "    per_step = k",
        ("tests/test_metric_definitions.py::test_a_confidence_threshold_is_explained_with_the_guesses_it_made",),
    ),
    Mutation(
        "explain: one side on OpenVINO's timer, the other on the stream",
        "prompt lookup's cost ratio compares two different clocks",
        "demo/core/explain.py",
        "    if verify_ms is None or base_ms is None:",
        "    if verify_ms is None:",
        ("tests/test_metric_definitions.py::test_prompt_lookup_falls_back_to_one_clock_for_both_sides",),
    ),
    Mutation(
        "startup: one row for every task",
        "the main and the draft model's stages share one line on the page, which alternates between them",
        "demo/engine/startup_progress.py",
        '        if role in task:\n            return role\n',
        '        if role in task:\n            return "model"\n',
        ("tests/test_startup_progress.py::test_two_models_prepared_side_by_side_keep_a_row_each",),
    ),
    Mutation(
        "startup: an estimate past its record",
        "a step that runs longer than it did last time still shows seconds left (negative or zero)",
        "demo/engine/startup_progress.py",
        "        if recorded is not None and recorded > elapsed:",
        "        if recorded is not None:",
        ("tests/test_startup_progress.py::test_time_left_from_the_rate_so_far_else_from_an_earlier_launch_else_none",),
    ),
    Mutation(
        "strangers: a Space's proxy address does not name a visitor",
        "the one-job rule binds only the session a script chooses: one address takes every handler",
        "demo/web/visitors.py",
        "                if parsed.is_global:",
        "                if False:",
        ("tests/test_strangers_load.py::test_one_address_sending_20_races_without_a_session_gets_one_and_the_next_visitor_is_next",),
    ),
    Mutation(
        "strangers: replays wait without a bound",
        "queued replays fill Gradio's one line and every race gets 'Queue is full'",
        "demo/web/visitors.py",
        'LANE_WAITING = {"race": 6, "replay": 2, "bench": 1}',
        'LANE_WAITING = {"race": 6, "replay": 100, "bench": 1}',
        ("tests/test_strangers_load.py::test_24_replays_by_fn_index_cannot_fill_the_line_a_race_needs",),
    ),
    Mutation(
        "strangers: request bodies have no size limit",
        "a 200 MB body is read whole into memory on the event loop",
        "demo/web/limits.py",
        "        limit = MAX_UPLOAD_BODY if upload else self.max_body",
        "        limit = 1 << 40",
        ("tests/test_strangers_load.py::test_a_200_mb_body_is_answered_413_while_a_race_keeps_streaming",),
    ),
    Mutation(
        "strangers 4: the guards are left out of the served page",
        "both servers serve every Gradio route (process_recording, file=https, api/) and unbounded streams",
        "demo/web/site.py",
        "def guards(demo) -> list:\n",
        "def guards(demo) -> list:\n    return []\n",
        ("tests/test_strangers_guards.py::test_a_route_the_page_does_not_use_answers_404_before_any_work",),
    ),
    Mutation(
        "strangers 4: the door looks the handler up through the session",
        "Gradio keeps a copy of the page's state for every session a refused request names",
        "demo/web/visitors.py",
        "        fn = fn_of(queue, body)\n",
        "        from gradio import route_utils\n        fn = route_utils.get_fn(queue.blocks, None, body)\n",
        ("tests/test_strangers_guards.py::test_races_the_door_refuses_keep_no_session_state_and_rotating_sessions_run_out",),
    ),
    Mutation(
        "strangers 4: uvicorn believes a loopback peer's X-Forwarded-For",
        "behind a local tunnel each request of a script names its own address",
        "demo/web/site.py",
        '    os.environ["FORWARDED_ALLOW_IPS"] = ""',
        "    pass",
        ("tests/test_strangers_guards.py::test_a_forged_forwarded_header_from_a_loopback_peer_names_nobody",),
    ),
    Mutation(
        "strangers 4: callers without an address are counted only in Gradio's line",
        "their race handlers start and wait in the engine's admission, uncounted: 20 of 20 accepted",
        "demo/web/visitors.py",
        "        mine = sum(v == (lane, owner) for v in self._live.values())",
        "        mine = sum(self._live.get(e._id) == (lane, owner) for e in waiting)",
        ("tests/test_strangers_load.py::test_callers_without_an_address_hold_at_most_half_the_race_lane_wherever_they_wait",),
    ),
    Mutation(
        "strangers 4: any session hash reaches Gradio",
        "a 900 KB session hash is kept as a session of its own",
        "demo/web/routes.py",
        'SESSION_HASH = re.compile(r"[A-Za-z0-9_-]{1,64}")',
        'SESSION_HASH = re.compile(r"[^\\n]{1,1000000}")',
        ("tests/test_strangers_guards.py::test_a_900_kb_session_hash_is_refused_and_nothing_is_kept",),
    ),
    Mutation(
        "strangers 4: one address holds any number of streams",
        "300 idle streams from one script take the file descriptors and a cluster's request slots",
        "demo/web/routes.py",
        "            if self._open[key] >= (MAX_OPEN_PER_VISITOR * self.ids.per_address if address else MAX_OPEN_ANONYMOUS):",
        "            if False:",
        ("tests/test_strangers_guards.py::test_one_address_cannot_hold_more_than_its_share_of_open_streams",),
    ),
    Mutation(
        "strangers 4: claims of ended jobs are forgotten only by their own keys",
        "a script rotating sessions leaves a key behind per request",
        "demo/engine/admission.py",
        "            for held in {id(t): t for t in self._visitors.values()}.values():",
        "            for held in [self._visitors[k] for k in visitor if k in self._visitors]:",
        ("tests/test_admission.py::test_claims_of_rotating_sessions_whose_jobs_ended_leave_no_key_behind",),
    ),
    Mutation(
        "strangers 4: a shared address holds any number of jobs",
        "with --visitors-per-address, one address rotating sessions takes every handler",
        "demo/web/visitors.py",
        "            if jobs >= self.ids.per_address:",
        "            if False:",
        ("tests/test_visitors.py::test_a_shared_address_holds_as_many_jobs_as_the_operator_allows_and_each_session_one",),
    ),
    Mutation(
        "numbers: the baseline falls back to the same format on paged attention",
        "a stateful pick that is not clearly faster is replaced by a paged configuration slower than another one",
        "demo/calibrate/cost_model.py",
        "    fastest_paged = plain_choice(paged, paired)\n",
        "    fastest_paged = plain_choice({split_plain_key(pick['main_format'])[0]: paged.get(split_plain_key(pick['main_format'])[0]) or next(iter(paged.values()))}, paired)\n",
        ("tests/test_calibrate.py::test_the_stateful_backend_runs_the_baseline_only_when_clearly_faster_in_every_pair",),
    ),
    Mutation(
        "numbers: the page's fastest line is the largest median, not the baseline",
        "the page names one configuration as fastest while the race's baseline runs another",
        "demo/engine/calibration_words.py",
        "        if measured is not None:\n            best = plain_key",
        "        if False:\n            best = plain_key",
        ("tests/test_calibrate.py::test_fair_mode_runs_on_the_fair_choice_where_models_yaml_says_auto",),
    ),
    Mutation(
        "numbers: a main format far from the original's greedy choices is a candidate",
        "a format agreeing on 70 % of tokens races as if its answers were the model's",
        "demo/calibrate/measure.py",
        "MIN_AGREEMENT = 0.90",
        "MIN_AGREEMENT = 0.50",
        ("tests/test_calibrate.py::test_a_main_format_that_agrees_with_the_original_on_70_percent_of_tokens_is_refused",),
    ),
    Mutation(
        "numbers: samples timed one after another make ties as if they were paired",
        "two formats timed at different moments of the drift tie, and the page races the slower one as the fastest",
        "demo/calibrate/cost_model.py",
        "    ties = [f for f in medians if f == best or (paired and ties_with(rates[f], rates[best]))]",
        "    ties = [f for f in medians if f == best or ties_with(rates[f], rates[best])]",
        ("tests/test_calibrate.py::test_plain_choice_ties_by_paired_samples",),
    ),
    Mutation(
        "house: the calibration is parsed at every question a race asks",
        "a race on a 2-core box validates the same file about two dozen times while it decodes",
        "demo/models/calibration_store.py",
        "    if kept is not None and kept[0] == version:",
        "    if False:",
        ("tests/test_calibration_store.py::test_a_race_on_an_unchanged_calibration_parses_it_not_again",),
    ),
    Mutation(
        "house: a rewritten calibration is not seen while its path is remembered",
        "the page keeps racing the K and formats of a calibration the launch has replaced",
        "demo/models/calibration_store.py",
        "    version = hashlib.blake2b(raw, digest_size=16).digest()",
        "    version = len(raw)",
        ("tests/test_calibration_store.py::test_a_file_is_validated_once_per_content_and_a_rewrite_is_seen_at_once",),
    ),
    Mutation(
        "strangers: a folder of this machine reaches the page when its name looks like a file's",
        "every visitor reads where the operator keeps the app's cache",
        "demo/core/errors.py",
        '        return f"…/{last}" if _FILE_NAME.fullmatch(last) else "a folder on the server"',
        '        return f"…/{last}"',
        ("tests/test_strangers_files.py::test_no_path_of_this_machine_reaches_the_line_every_visitor_reads",),
    ),
    Mutation(
        "numbers: a tie is twice as wide",
        "a baseline 5 % slower than the machine's best counts as its tie",
        "demo/calibrate/cost_model.py",
        "    return bool(ratios) and median(ratios) >= 1 - TIE_MARGIN",
        "    return bool(ratios) and median(ratios) >= 1 - 2 * TIE_MARGIN",
        ("tests/test_calibrate.py::test_a_configuration_4_to_6_percent_slower_in_the_median_pair_is_not_a_tie",),
    ),
    Mutation(
        "numbers: the page hides the fastest configuration without a draft",
        "a visitor never reads what the baseline is measured against",
        "demo/web/render.py",
        "    if why.fastest_alone:",
        "    if False:",
        ("tests/test_render.py::test_why_names_the_fastest_configuration_without_a_draft_and_the_reference",),
    ),
    Mutation(
        "numbers: a headline's spread is a mean",
        "one disturbed pair moves the reported ratio",
        "lab/paired.py",
        '    return {"median": statistics.median(values),',
        '    return {"median": statistics.mean(values),',
        ("tests/test_headline.py::test_the_spread_of_paired_ratios_is_their_median_not_their_mean",),
    ),
    Mutation(
        "numbers: the verdict line's two rates swapped",
        "the page reads '1.50x speedup (20.0 vs 30.0 tok/s)': the slower rate where the faster belongs",
        "demo/web/render.py",
        "                  f'({summary.speculative.tokens_per_s:.1f} vs {summary.baseline.tokens_per_s:.1f} tok/s), ' + glance)",
        "                  f'({summary.baseline.tokens_per_s:.1f} vs {summary.speculative.tokens_per_s:.1f} tok/s), ' + glance)",
        ("tests/test_render.py::test_the_verdict_line_puts_the_speculative_rate_first_as_its_speedup_reads",),
    ),
    Mutation(
        "strangers 4: a child side has no deadline",
        "a hung child holds the machine for ever",
        "demo/engine/child_side.py",
        "            if now - last > allowed:",
        "            if False:",
        ("tests/test_child_side.py::test_a_side_that_stops_answering_ends_at_its_deadline_with_a_sentence_and_frees_the_machine",),
    ),
    Mutation(
        "calibration: the timed K's own step dropped",
        "a pair timed at K=2 is predicted there from the a + b·K line, not from what its real pipeline measured",
        "demo/calibrate/calibration.py",
        '            extra = {int(k): v for k, v in o["extra_s"].items()} if o else None',
        "            extra = None",
        ("tests/test_calibration_steps.py::test_a_timed_k_keeps_the_overhead_its_real_pipeline_measured",),
    ),
    Mutation(
        "calibration: race contenders read against stateful rates",
        "a main close to the fastest on paged attention is not timed with race threads when the stateful "
        "backend ran faster with the whole machine",
        "demo/calibrate/calibration.py",
        '                paged = {f: r for f, r in found.plain["fair"]["rates"].items() if split_plain_key(f)[1] == "PA"}',
        '                paged = dict(found.plain["fair"]["rates"])',
        ("tests/test_calibration_steps.py::test_race_threads_time_every_main_close_to_the_fastest_on_paged_attention",),
    ),
    Mutation(
        "child side: a Stop kills a side that is decoding",
        "on a busy machine a stopped side whose step outlasts the grace is killed, and the next visitor waits "
        "for it to load again",
        "demo/engine/child_side.py",
        "            if cancelled_at is not None and not chunks and now - cancelled_at > self._stop_grace():",
        "            if cancelled_at is not None and now - cancelled_at > self._stop_grace():",
        ("tests/test_child_side.py::test_a_side_stopped_mid_step_is_waited_for_not_killed_however_slow_the_step",),
    ),
    Mutation(
        "free drafting: the step view's record one step off",
        "the own loop's record of its guesses is shifted against the chunks, so each step shows another's guesses",
        "demo/engine/steps.py",
        "    steps = check_steps(chunk_ids[1:], [guessed for guessed, _, _ in result.guess_steps[1:]])",
        "    steps = check_steps(chunk_ids[1:], [guessed for guessed, _, _ in result.guess_steps[:-1]])",
        ("tests/test_verify_loop.py::test_a_step_record_that_disagrees_with_the_run_shows_as_differing",
         "tests/test_verify_loop.py::test_a_race_with_free_drafting_runs_through_the_arena"),
    ),
    Mutation(
        "chat: a conversation changes method mid-way",
        "a chat's later turn races another speculative method, so its per-turn speedups compare unlike runs",
        "demo/engine/chat.py",
        "        if self.method is not None and self.turns and method != self.method:",
        "        if False:",
        ("tests/test_chat.py::test_a_chat_keeps_its_speculative_method",),
    ),
    Mutation(
        "calibration: a budget too small is found out by measuring",
        "a memory budget the weight files alone exceed is refused only after minutes of measuring",
        "demo/calibrate/calibration.py",
        "    refuse_when_no_pair_can_fit(s)\n",
        "",
        ("tests/test_calibrate.py::test_nothing_fits_a_tiny_budget_and_nothing_is_measured_to_find_out",),
    ),
    Mutation(
        "calibration: the weight-file floor counts the largest files",
        "the budget check before measuring adds the largest main and draft files, refusing pairs that fit",
        "demo/calibrate/calibration.py",
        "    smallest = [min(weight_bytes(folder)",
        "    smallest = [max(weight_bytes(folder)",
        ("tests/test_calibration_steps.py::test_weight_files_too_big_for_the_budget_are_refused_before_any_stage",),
    ),
]


def repo_files() -> list[str]:
    """Tracked files, plus untracked (not ignored) ones under demo/, lab/ and tests/: a new module
    that the code imports must come along, someone's scratch folder need not."""
    def ls(*args: str) -> list[str]:
        out = subprocess.run(["git", "ls-files", "-z", *args], cwd=ROOT, capture_output=True, check=True)
        return [p for p in out.stdout.decode().split("\0") if p]

    new = [p for p in ls("--others", "--exclude-standard") if p.startswith(("demo/", "lab/", "tests/"))]
    return sorted({p for p in ls() + new if (ROOT / p).is_file()})


def anchor_problems(mutations=None, root: Path = ROOT) -> list[str]:
    """Every way a mutation no longer fits the code: its anchor is not in its module exactly
    once, or a test it names is gone. Empty when all is well (tests/test_mutation_anchors.py)."""
    problems = []
    for m in MUTATIONS if mutations is None else mutations:
        path = root / m.path
        count = path.read_text(encoding="utf-8").count(m.old) if path.is_file() else 0
        if count != 1:
            problems.append(f"{m.name}: its anchor occurs {count} times in {m.path}, not once")
        for test in m.tests:
            file, _, name = test.partition("::")
            name = name.split("::")[0].split("[")[0]  # a class's test, a parametrized test's id
            source = (root / file).read_text(encoding="utf-8") if (root / file).is_file() else None
            if source is None or (name and not re.search(rf"^((async )?def|class) {re.escape(name)}\b", source, re.M)):
                problems.append(f"{m.name}: no test {test}")
    return problems


class Copy:
    """One copy of the repository, patched for one mutant at a time and then put back."""

    def __init__(self, dest: Path, files: list[str]):
        self.dest = dest
        self.pristine: dict[str, bytes | None] = {}  # None: a big file linked, not copied
        for rel in files:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            source = ROOT / rel
            try:
                if source.stat().st_size > BIG_FILE:
                    target.symlink_to(source)  # data nobody patches: share it, do not copy it
                    self.pristine[rel] = None
                else:
                    data = source.read_bytes()
                    target.write_bytes(data)
                    shutil.copystat(source, target)
                    self.pristine[rel] = data
            except FileNotFoundError:
                pass  # removed (or an editor's temporary file) since git listed it

    def apply(self, mutation: Mutation) -> bool:
        original = self.pristine.get(mutation.path)
        if original is None:
            return False
        text = original.decode("utf-8")
        if text.count(mutation.old) != 1:
            return False
        (self.dest / mutation.path).write_text(text.replace(mutation.old, mutation.new), encoding="utf-8")
        return True

    def restore(self) -> list[str]:
        """Make the copy byte-for-byte what it was: rewrite every file that differs (the
        patched module, anything a test changed), remove what a run left behind (bytecode
        included). Returns what it changed, for the log."""
        changed = []
        for dirpath, dirnames, filenames in os.walk(self.dest, topdown=True):
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = Path(dirpath, name)
                rel = path.relative_to(self.dest).as_posix()
                if rel not in self.pristine:
                    path.unlink()
                    changed.append(f"removed {rel}")
            for d in list(dirnames):
                path = Path(dirpath, d)
                rel = path.relative_to(self.dest).as_posix()
                if not path.is_symlink() and not any(p.startswith(rel + "/") for p in self.pristine):
                    shutil.rmtree(path)
                    dirnames.remove(d)
                    changed.append(f"removed {rel}/")
        for rel, data in self.pristine.items():
            path = self.dest / rel
            if data is None:
                if not (path.is_symlink() and path.resolve() == (ROOT / rel).resolve()):
                    path.unlink(missing_ok=True)
                    path.symlink_to(ROOT / rel)
                    changed.append(f"relinked {rel}")
            elif not path.is_file() or path.is_symlink() or path.read_bytes() != data:
                if path.is_symlink():
                    path.unlink()
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                changed.append(f"rewrote {rel}")
        return changed

    def differs(self) -> list[str]:
        """What still differs from the pristine copy (must be nothing after restore())."""
        bad = [rel for rel, data in self.pristine.items()
               if data is not None and (self.dest / rel).read_bytes() != data]
        bad += [p.relative_to(self.dest).as_posix() for p in self.dest.rglob("*")
                if p.is_file() and p.relative_to(self.dest).as_posix() not in self.pristine]
        return bad


# -- running one pytest session -----------------------------------------------------------

def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def child_env() -> dict:
    env = dict(os.environ)
    env.setdefault("SPECDEC_CACHE_DIR", str(ROOT / ".cache-test"))
    env.update(ENV)
    return env


def preload() -> str | None:
    """Import the heavy third-party libraries once, in this process, for the forked children
    to inherit. Returns why forking is off (None: forking is safe)."""
    if not hasattr(os, "fork") or not hasattr(os, "setsid"):
        return "os.fork is not available here"
    os.environ.update(child_env())
    # numpy's OpenBLAS keeps a worker thread per extra core (it did with CI=true set), and a
    # fork copies only the calling thread; the tests need no parallel BLAS.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.dont_write_bytecode = True  # PYTHONDONTWRITEBYTECODE is only read at start-up
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  a missing optional library: the child imports what it needs
            pass
    # OpenVINO's telemetry (imported with openvino) leaves a ThreadPoolExecutor worker parked.
    # A fork copies only the calling thread, so end every such worker before forking.
    from concurrent.futures import ThreadPoolExecutor

    for obj in gc.get_objects():
        if isinstance(obj, ThreadPoolExecutor):
            obj.shutdown(wait=True)
    own = [m for m in sys.modules if m.split(".")[0] in OWN_MODULES]
    if own:
        return f"this process imported {own[:3]}, which each child must import from its copy"
    threads = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["?"]
    import threading

    if threading.active_count() != 1 or len(threads) != 1:
        return f"a library left threads running ({[t.name for t in threading.enumerate()]}, {len(threads)} OS threads)"
    return None


def _child(dest: Path, tests: tuple[str, ...], log: Path, extra: tuple[str, ...]) -> None:
    """In the forked child: become `python -m pytest ...` run in the copy. Never returns."""
    rc = 3
    try:
        os.setsid()  # a process group of its own: a timeout kills whatever the tests started
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.chdir(dest)
        # As `python -m pytest` run in the copy: the copy first, never this checkout.
        here = {os.path.realpath(ROOT), os.path.realpath(ROOT / "scripts"), os.path.realpath(dest)}
        sys.path[:] = [str(dest)] + [p for p in sys.path if os.path.realpath(p or ".") not in here]
        # Plugins that this process imported with their libraries (anyio's, with Gradio) cannot
        # have their asserts rewritten: pytest says so once per session; nothing depends on it.
        args = [*PYTEST_ARGS, "-W", "ignore:Module already imported so cannot be rewritten", *extra, *tests]
        sys.argv = ["pytest", *args]
        import pytest

        rc = int(pytest.main(args))
        elsewhere = [f"{name} from {module.__file__}" for name, module in list(sys.modules.items())
                     if name.split(".")[0] in OWN_MODULES and getattr(module, "__file__", None)
                     and not os.path.realpath(module.__file__).startswith(os.path.realpath(dest) + os.sep)]
        if elsewhere:
            print(f"mutation_check: imported outside the copy: {elsewhere[:3]}", flush=True)
            rc = 3
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)  # no interpreter shutdown: a pipeline thread still running cannot hang it


class Run:
    """One pytest session over `tests` in `dest`, forked or spawned; poll() until done."""

    def __init__(self, dest: Path, tests: tuple[str, ...], log: Path, fork: bool, timeout_s: float,
                 extra: tuple[str, ...] = ()):
        self.tests, self.log, self.timeout_s, self.t0 = tests, log, timeout_s, time.perf_counter()
        self.rc: int | None = None
        self.timed_out = False
        if fork:
            sys.stdout.flush()
            sys.stderr.flush()
            self.pid = os.fork()
            if self.pid == 0:
                _child(dest, tests, log, extra)
            self.proc = None
        else:
            with open(log, "wb") as out:
                self.proc = subprocess.Popen([sys.executable, "-m", "pytest", *PYTEST_ARGS, *extra, *tests], cwd=dest,
                                             env=child_env(), stdout=out, stderr=subprocess.STDOUT,
                                             start_new_session=True)
            self.pid = self.proc.pid

    def poll(self) -> bool:
        if self.rc is not None:
            return True
        if self.proc is not None:
            status = self.proc.poll()
            done = status is not None
        else:
            pid, raw = os.waitpid(self.pid, os.WNOHANG)
            done = pid != 0
            status = os.waitstatus_to_exitcode(raw) if done else None
        if not done and time.perf_counter() - self.t0 > self.timeout_s:
            self._kill_group(child_too=True)
            if self.proc is not None:
                self.proc.wait()
            else:
                os.waitpid(self.pid, 0)
            self.timed_out, done, status = True, True, -1
        if done:
            self.seconds = time.perf_counter() - self.t0
            self._kill_group()  # whatever the tests started and left behind
            self.rc = status
        return done

    def _kill_group(self, child_too: bool = False) -> None:
        """SIGKILL the child's process group (and the child itself while it is not reaped:
        it might not have made its group yet)."""
        for kill in (os.killpg, os.kill) if child_too else (os.killpg,):
            try:
                kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def abandon(self) -> None:
        """This run is not waited for (Ctrl-C): end it and everything it started."""
        if self.rc is None:
            self._kill_group(child_too=True)
            if self.proc is not None:
                self.proc.wait()
            else:
                os.waitpid(self.pid, 0)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


# pytest's closing line, e.g. "1 failed, 3 passed in 2.10s" or "1 error in 0.52s".
SUMMARY_LINE = re.compile(r"^=*\s*(?:\d+ \w+(?:, )?)+ in [\d.]+s", re.M)


def failed_tests(out: str) -> bool:
    """Whether pytest's last summary line counts a failed test. Exit code 1 alone does not
    tell: a fixture or setup *error* exits 1 too, and a mutant that only breaks a fixture
    was not caught by any assertion."""
    lines = SUMMARY_LINE.findall(out)
    return bool(lines) and re.search(r"\b\d+ failed\b", lines[-1]) is not None


def verdict(run: Run) -> str:
    out = run.output()
    if run.timed_out:
        return "timeout"
    if run.rc == 0:
        return "SURVIVED"
    if run.rc == 1 and failed_tests(out):
        return "killed"
    if run.rc is not None and run.rc < 0 and re.search(r"\b\d+ failed\b", out):
        return "killed"  # a test failed, then the process died (a pipeline still generating)
    return f"ERROR (pytest exit {run.rc}{', no test failed' if run.rc == 1 else ''})"


def short(tests: tuple[str, ...]) -> str:
    return ", ".join(t.replace("tests/", "").replace(".py::", "::") for t in tests)


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@dataclass
class Job:
    label: str
    mutation: Mutation | None  # None: the unpatched code
    tests: tuple[str, ...]
    timeout_s: float
    extra: tuple[str, ...] = ()  # more pytest arguments

    @property
    def alone(self) -> bool:
        return any(t in ALONE for t in self.tests)


def run_all(copies: list[Copy], jobs: list[Job], fork: bool, tmp: Path, verbose: bool):
    """Run the jobs on the copies, one job per copy at a time, in order, except that a job
    with a test in ALONE runs with nothing beside it (those go first); yield (job, result,
    seconds, output) as each finishes."""
    pending = sorted(jobs, key=lambda job: not job.alone)
    busy: dict[int, tuple] = {}
    try:
        yield from _run_all(copies, pending, busy, fork, tmp, verbose)
    finally:  # interrupted: no child may go on running in a copy about to be deleted
        for _, run in busy.values():
            run.abandon()


def _run_all(copies, pending, busy, fork, tmp, verbose):
    n = 0
    while pending or busy:
        for slot, copy in enumerate(copies):
            if slot in busy or not pending:
                continue
            if busy and (pending[0].alone or any(job.alone for job, _ in busy.values())):
                break  # a job that runs alone waits for the others to end, and holds the rest back
            job = pending.pop(0)
            if job.mutation is not None and not copy.apply(job.mutation):
                yield job, "PATCH STALE", 0.0, f"anchor not found exactly once in {job.mutation.path}"
                continue
            n += 1
            busy[slot] = (job, Run(copy.dest, job.tests, tmp / f"run{n}.log", fork, job.timeout_s, job.extra))
        time.sleep(0.02)
        for slot in list(busy):
            job, run = busy[slot]
            if not run.poll():
                continue
            del busy[slot]
            out = run.output()
            left = copies[slot].restore()
            if job.mutation is not None:
                left = [c for c in left if c != f"rewrote {job.mutation.path}"]
            if verbose and left:
                print(f"    ({job.label}: the run changed the copy; put back: {', '.join(left[:5])})", file=sys.stderr)
            still = copies[slot].differs()
            if still:
                raise SystemExit(f"mutation_check: could not restore the copy after {job.label}: {still[:5]}")
            result = verdict(run) if job.mutation is not None else "pass" if run.rc == 0 else "FAILED"
            yield job, result, run.seconds, out


def split(tests: tuple[str, ...], parts: int) -> list[tuple[str, ...]]:
    """The unpatched run's selections as pytest sessions. One part: one session for all.
    More: a session per test file (its module fixtures shared as in the suite), the files
    with the most selections first, and those in ALONE in a session of their own, which
    run_all runs with nothing beside it."""
    if parts == 1:
        return [tests]
    by_file: dict[str, list[str]] = {}
    for t in tests:
        if t not in ALONE:
            by_file.setdefault(t.split("::")[0], []).append(t)
    def slow_first(session):
        file = session[0].split("::")[0]
        return (SLOW_FILES.index(file) if file in SLOW_FILES else len(SLOW_FILES), -len(session))

    sessions = [tuple(t for t in tests if t in ALONE)] + sorted(map(tuple, by_file.values()), key=slow_first)
    return [session for session in sessions if session]


def durations(reports: list[Path]) -> dict[tuple[str, str], float]:
    """Seconds per (test file, test function) from the unpatched sessions' JUnit XML (setup,
    call and teardown; a module fixture counts for the first test that used it)."""
    import xml.etree.ElementTree as ET

    took: dict[tuple[str, str], float] = {}
    for report in reports:
        try:
            cases = ET.parse(report).getroot().iter("testcase")
        except (OSError, ET.ParseError):
            continue
        for case in cases:
            key = (case.get("classname", "").replace(".", "/") + ".py", case.get("name", "").split("[")[0])
            took[key] = took.get(key, 0.0) + float(case.get("time") or 0)
    return took


def not_shown_passing(tests: tuple[str, ...], report: Path):
    """None when the JUnit report shows every selection in `tests` run and passing (no failure,
    error or skip), else why not, in a few words."""
    import xml.etree.ElementTree as ET

    try:
        cases = list(ET.parse(report).getroot().iter("testcase"))
    except (OSError, ET.ParseError) as e:
        return f"{report} cannot be read ({e.__class__.__name__})"
    seen: dict[tuple[str, str], bool] = {}
    for case in cases:
        key = (case.get("classname", "").replace(".", "/") + ".py", case.get("name", ""))
        ok = not any(case.find(tag) is not None for tag in ("failure", "error", "skipped"))
        seen[key] = seen.get(key, True) and ok
    for t in tests:
        file, _, name = t.partition("::")
        hits = [ok for (f, n), ok in seen.items()
                if f == file and (not name or n == name or ("[" not in name and n.split("[")[0] == name))]
        if not hits:
            return f"{t} is not in {report}"
        if not all(hits):
            return f"{t} did not pass in {report}"
    return None


def expected_seconds(tests: tuple[str, ...], took: dict[tuple[str, str], float]) -> float:
    total = 0.0
    for t in tests:
        file, _, name = t.partition("::")
        total += sum(s for (f, n), s in took.items() if f == file and (not name or n == name.split("[")[0]))
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default="", help="run only mutations whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--anchors", action="store_true", help="only check that every patch applies; run no test")
    ap.add_argument("-j", "--jobs", type=int, default=min(2, cores()),
                    help="pytest sessions at a time, each in its own copy (default: 2, or 1 on one core)")
    ap.add_argument("--no-fork", action="store_true", help="a fresh `python -m pytest` for every session")
    ap.add_argument("-v", "--verbose", action="store_true", help="print pytest's output tail for every run")
    ap.add_argument("--passed", type=Path, metavar="JUNIT_XML",
                    help="the JUnit report of a whole-suite run of this very tree (scripts/test.sh writes one): "
                         "when every mutation's tests passed in it, the unpatched run is not repeated")
    args = ap.parse_args(argv)

    chosen = [m for m in MUTATIONS if args.k.lower() in m.name.lower()]
    if args.list:
        for m in chosen:
            print(f"{m.name}\n    breaks: {m.why}\n    patches {m.path}; runs {short(m.tests)}")
        print(f"\n{len(chosen)} mutations")
        return 0
    if not chosen:
        print(f"no mutation matches {args.k!r}", file=sys.stderr)
        return 2
    stale = anchor_problems(chosen)
    if args.anchors or stale:
        print("\n".join(stale) or f"all {len(chosen)} anchors apply", file=sys.stderr if stale else sys.stdout)
        return 1 if stale else 0

    started = time.perf_counter()
    why_not = "--no-fork" if args.no_fork else preload()
    fork = why_not is None
    print(f"mutation_check: {len(chosen)} mutations, {max(1, args.jobs)} pytest session(s) at a time, each "
          + ("forked from a process that imported the heavy libraries once" if fork
             else f"a fresh process ({why_not})"), flush=True)

    files = repo_files()
    rows, bad = [], 0
    with tempfile.TemporaryDirectory(prefix="mutation-check-") as tmp_name:
        tmp = Path(tmp_name)
        copies = [Copy(tmp / f"copy{i}", files) for i in range(max(1, args.jobs))]
        # The unpatched copy must pass the very tests that are to kill the mutants; a suite
        # run that just passed them all on this tree has shown that already.
        all_tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        why_again = None if args.passed is None else not_shown_passing(all_tests, args.passed)
        if args.passed is not None and why_again is None:
            print(f"  unpatched: every mutation's tests passed in {args.passed}; not run again", flush=True)
            sessions, reports = [], [args.passed]
        else:
            if why_again:
                print(f"  unpatched: run here, because {why_again}", flush=True)
            sessions = split(all_tests, len(copies))
            reports = [tmp / f"unpatched{i}.xml" for i in range(len(sessions))]
        clean_jobs = [Job("(none: unpatched code)", None, part, CLEAN_TIMEOUT_S, ("--junitxml", str(report)))
                      for part, report in zip(sessions, reports)]
        t0 = time.perf_counter()
        for _, result, seconds, out in run_all(copies, clean_jobs, fork, tmp, args.verbose):
            print(f"  unpatched: {result} in {seconds:.0f} s", flush=True)
            if result != "pass":
                bad += 1
                print(f"The unpatched tests fail; no mutation result would mean anything:\n{out[-3000:]}",
                      file=sys.stderr)
        rows.append(("(none: unpatched code)", f"{len(all_tests)} test selections, {len(clean_jobs)} session(s)",
                     "pass" if not bad else "FAILED", time.perf_counter() - t0))
        if not bad:
            jobs = [Job(m.name, m, m.tests, TIMEOUT_S) for m in chosen]
            if len(copies) > 1:  # the longest first, so that the last ones to end are short
                took = durations(reports)
                jobs.sort(key=lambda job: -expected_seconds(job.tests, took))
            finished = {}
            for job, result, seconds, out in run_all(copies, jobs, fork, tmp, args.verbose):
                if result != "killed":
                    bad += 1
                print(f"  [{len(finished) + 1}/{len(chosen)}] {result} in {seconds:.0f} s: {job.label}", flush=True)
                if args.verbose or result != "killed":
                    print(f"--- {job.label}: {result}\n{tail(out)}", file=sys.stderr)
                finished[job.label] = (job.label, short(job.tests), result, seconds)
            rows += [finished[m.name] for m in chosen]

    w1 = max(len(r[0]) for r in rows)
    w2 = min(max(len(r[1]) for r in rows), 90)
    print(f"{'mutation':<{w1}}  {'tests run':<{w2}}  {'result':<11}  seconds")
    for name, tests, result, took in rows:
        print(f"{name:<{w1}}  {tests:<{w2}}  {result:<11}  {took:7.1f}")
    killed = sum(r[2] == "killed" for r in rows)
    print(f"\n{killed} of {len(rows) - 1} mutants killed in {time.perf_counter() - started:.0f} s"
          + ("" if not bad else f"; {bad} problem(s): see above"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
