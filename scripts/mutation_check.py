"""Prove that the test suite has teeth: break the code on purpose and watch the tests fail.

    python scripts/mutation_check.py            # every mutation (about 1-2 minutes on 2 cores)
    python scripts/mutation_check.py -k stop    # only mutations whose name contains "stop"
    python scripts/mutation_check.py --list     # show the mutations and their tests

For each mutation it copies the repository's files (`git ls-files`, plus new untracked files
under demo/ and tests/) into a temporary folder, applies one textual patch to one demo/
module, and runs a chosen subset of fast tests there (`pytest -x -q`). The mutant must be
KILLED: the tests fail. It first runs all those tests once on the unpatched copy, which must
pass, so a failure can be blamed on the mutation.

Prepared models are not converted again: the copies share $SPECDEC_CACHE_DIR (default: this
checkout's .cache-test, as scripts/test.sh uses).

It prints a table (mutation, tests run, result, seconds) and exits non-zero when any mutant
SURVIVED, when a patch no longer applies (its anchor text is gone from the module: update
the mutation next to the code change), or when the unpatched tests fail.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300  # per pytest run; tests have their own hang guards, so this is a last resort
BIG_FILE = 20 << 20  # tracked files larger than this are linked into the copies, not copied


@dataclass(frozen=True)
class Mutation:
    name: str
    why: str    # the behaviour that breaks
    path: str   # the demo/ module patched
    old: str    # anchor text, must occur exactly once
    new: str
    tests: tuple[str, ...]


MUTATIONS = [
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
        "race: speculative side ignores Stop (page)",
        "the same, caught through the page: Stop pressed via gradio_client",
        "demo/engine/race.py",
        "        return not stop.is_set()",
        "        return runner.side == \"speculative\" or not stop.is_set()",
        ("tests/test_app.py::test_stop_cancels_within_two_steps_and_the_page_stays_usable",),
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
        "        if pending:\n            stop.set()\n\n\ndef _drain",
        "        if pending:\n            pass\n\n\ndef _drain",
        ("tests/test_race_logic.py::test_closing_the_stream_returns_at_once_and_the_threads_end_by_themselves",),
    ),
    Mutation(
        "race: closing the stream waits for the workers",
        "closing joins the threads on the server's event loop, freezing every visitor",
        "demo/engine/race.py",
        "        if pending:\n            stop.set()\n\n\ndef _drain",
        "        if pending:\n            stop.set()\n"
        "            for t in threading.enumerate():\n"
        "                if t.name.startswith('race-'):\n"
        "                    t.join()\n\n\ndef _drain",
        ("tests/test_race_logic.py::test_closing_the_stream_returns_at_once_and_the_threads_end_by_themselves",),
    ),
    Mutation(
        "race: a side's clock starts with its thread",
        "time spent waiting for a pipeline a stopped run still holds counts against a side",
        "demo/engine/race.py",
        "        result = runner.run(prompt, settings, on_chunk, on_start)",
        "        on_start(time.perf_counter())\n"
        "        result = runner.run(prompt, settings, on_chunk, lambda t: None)",
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
        ("tests/test_calibrate.py::test_tokens_per_step_match_a_real_speculative_run",),
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
        "demo/calibrate/cost_model.py",
        "    step = k * draft_step + verify[k] + max(0.0, extra)",
        "    step = k * draft_step + verify[k]",
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
        "demo/calibrate/cost_model.py",
        "    extra = timed_extra[k] if timed_extra and k in timed_extra else overhead[0] + overhead[1] * k",
        "    extra = overhead[0] + overhead[1] * k",
        ("tests/test_calibrate.py::test_prediction_with_overhead_by_hand",),
    ),
    Mutation(
        "pipelines: an evicted side is kept alive",
        "fair mode on a pair that fits one side at a time would hold both pipelines anyway",
        "demo/engine/pipelines.py",
        "        _, runners = self._pairs.popitem(last=False)\n        runners.clear()",
        "        _, runners = self._pairs.popitem(last=False)\n"
        "        self.__dict__.setdefault('kept', []).append(dict(runners))\n"
        "        runners.clear()",
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
        ("tests/test_fairness.py::test_the_page_shows_the_engines_own_numbers",),
    ),
    Mutation(
        "pipelines: baseline without the shared scheduler",
        "the baseline gets OpenVINO's default scheduler (prefix cache on), the speculative side does not",
        "demo/engine/pipelines.py",
        "            pipes[BASELINE] = ov.LLMPipeline(key.main, o.main_device, **main_props)",
        "            pipes[BASELINE] = ov.LLMPipeline(key.main, o.main_device,\n"
        "                                             **{k: v for k, v in main_props.items() if k != 'scheduler_config'})",
        ("tests/test_fairness.py::test_a_repeated_long_prompt_gets_no_free_prefill_on_either_side",),
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
        '                    and now - state["printed"] >= self.repeat_s):',
        '                    ):',
        ("tests/test_native_safety.py::test_the_log_prints_progress_sparingly_and_each_tasks_duration",),
    ),
    Mutation(
        "quiet log: one stream for everything",
        "a calibration line ends the pair's warm-up, so the log times the wrong step",
        "demo/core/quiet_log.py",
        '    return head if sep and " " not in head else ""',
        '    return ""',
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
        "            old = self._folders[:-self.keep] if len(self._folders) > self.keep else []",
        "            old = []",
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
        '            "main": _without_paths(preset_obj.main.model_dump()),',
        '            "main": preset_obj.main.model_dump(),',
        ("tests/test_bench.py::test_the_json_names_no_model_path_of_this_machine",),
    ),
]


def repo_files() -> list[str]:
    """Tracked files, plus untracked (not ignored) ones under demo/ and tests/: a new module
    that the code imports must come along, someone's scratch folder need not."""
    def ls(*args: str) -> list[str]:
        out = subprocess.run(["git", "ls-files", "-z", *args], cwd=ROOT, capture_output=True, check=True)
        return [p for p in out.stdout.decode().split("\0") if p]

    new = [p for p in ls("--others", "--exclude-standard") if p.startswith(("demo/", "tests/"))]
    return sorted({p for p in ls() + new if (ROOT / p).is_file()})


def copy_repo(dest: Path, files: list[str]) -> None:
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        source = ROOT / rel
        try:
            if source.stat().st_size > BIG_FILE:
                target.symlink_to(source)  # data nobody patches: share it, do not copy it
            else:
                shutil.copy2(source, target)
        except FileNotFoundError:
            pass  # removed (or an editor's temporary file) since git listed it


def apply(mutation: Mutation, dest: Path) -> bool:
    path = dest / mutation.path
    text = path.read_text(encoding="utf-8")
    if text.count(mutation.old) != 1:
        return False
    path.write_text(text.replace(mutation.old, mutation.new), encoding="utf-8")
    return True


def run_tests(dest: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    env = dict(os.environ)
    env.setdefault("SPECDEC_CACHE_DIR", str(ROOT / ".cache-test"))
    env.update(GRADIO_ANALYTICS_ENABLED="False", HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="1",
               PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        proc = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return -1, out
    return proc.returncode, proc.stdout + proc.stderr


def short(tests: tuple[str, ...]) -> str:
    return ", ".join(t.replace("tests/", "").replace(".py::", "::") for t in tests)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default="", help="run only mutations whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="print pytest's output tail for every run")
    args = ap.parse_args(argv)

    chosen = [m for m in MUTATIONS if args.k.lower() in m.name.lower()]
    if args.list:
        for m in chosen:
            print(f"{m.name}\n    breaks: {m.why}\n    patches {m.path}; runs {short(m.tests)}")
        return 0
    if not chosen:
        print(f"no mutation matches {args.k!r}", file=sys.stderr)
        return 2

    files = repo_files()
    rows, bad = [], 0
    with tempfile.TemporaryDirectory(prefix="mutation-check-") as tmp:
        # The unpatched copy must pass the very tests that are to kill the mutants.
        clean = Path(tmp) / "clean"
        copy_repo(clean, files)
        all_tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        t0 = time.perf_counter()
        rc, out = run_tests(clean, all_tests)
        took = time.perf_counter() - t0
        rows.append(("(none: unpatched code)", f"{len(all_tests)} test selections", "pass" if rc == 0 else "FAILED", took))
        if rc != 0:
            bad += 1
            print(f"The unpatched tests fail (pytest exit {rc}); no mutation result would mean anything:\n"
                  + out[-3000:], file=sys.stderr)
        else:
            for i, m in enumerate(chosen):
                dest = Path(tmp) / f"m{i}"
                copy_repo(dest, files)
                t0 = time.perf_counter()
                if not apply(m, dest):
                    result, rc, out = "PATCH STALE", None, f"anchor not found exactly once in {m.path}"
                else:
                    rc, out = run_tests(dest, m.tests)
                    result = {0: "SURVIVED", 1: "killed"}.get(rc, "timeout" if rc == -1 else f"ERROR (pytest exit {rc})")
                    if rc is not None and rc < -1 and re.search(r"\b\d+ failed\b", out):
                        result = "killed"  # a test failed, then the process died at exit (a pipeline still generating)
                took = time.perf_counter() - t0
                if result != "killed":
                    bad += 1
                if args.verbose or result != "killed":
                    print(f"--- {m.name}: {result}\n" + "\n".join(out.strip().splitlines()[-15:]), file=sys.stderr)
                rows.append((m.name, short(m.tests), result, took))
                shutil.rmtree(dest, ignore_errors=True)

    w1 = max(len(r[0]) for r in rows)
    w2 = min(max(len(r[1]) for r in rows), 90)
    print(f"{'mutation':<{w1}}  {'tests run':<{w2}}  {'result':<11}  seconds")
    for name, tests, result, took in rows:
        print(f"{name:<{w1}}  {tests:<{w2}}  {result:<11}  {took:7.1f}")
    killed = sum(r[2] == "killed" for r in rows)
    print(f"\n{killed} of {len(rows) - 1} mutants killed" + ("" if not bad else f"; {bad} problem(s): see above"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
