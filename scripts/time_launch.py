"""Time a first (or later) launch of `python app.py`: how long until a visitor's race gets
its first token and finishes, and until the app says Ready (calibration included).

    python scripts/time_launch.py CACHE_DIR [--port 7860] [--json OUT.json] [--no-race] [--limit-s S] [--no-profiles]

An empty CACHE_DIR times a first launch. Every line the app prints is echoed with the seconds
since start. As soon as the page answers, a visitor (gradio_client) races a short prompt on
the default pair; it waits in the app's queue like anyone. The script stops the app once it
says ready (or an error), prints the times and the number of log lines, and writes them
with the machine's CPU flags to --json, with a per-stage timeline read from the log: each
stage's start and end in seconds after launch (a stage starts with its first line and ends with
its "100% (… s)" or "done in … s" line; the app's QuietLog prints those).
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from demo.core.machine import machine_info  # noqa: E402
from demo.models.presets import load_presets  # noqa: E402

PROMPT = "Write a Python function that checks whether a number is prime."
# What QuietLog appends to a stage's line: a percentage, "…", a duration, "done in N s".
_DONE = re.compile(r"(?::\s*100%\s*\([\d.]+ s\)|:\s*done in [\d.]+ s)\s*$")
_TAIL = re.compile(r"(?::\s*\d+(?:\.\d+)?%(?:\s*\([\d.]+ s\))?|…|:\s*done in [\d.]+ s)\s*$")


def timeline(lines: list) -> list[dict]:
    """[(seconds, app line)] -> one row per stage, in order of start: {stage, start_s, end_s}
    (end_s None when the log never closed it: a one-off sentence, or a wait)."""
    rows: dict = {}
    for t, line in lines:
        if line.startswith("[visitor] "):  # a stage of the visitor's race: it ends where the next begins
            if rows.get("visitor") is not None:
                rows["visitor"]["end_s"] = round(t, 1)
            rows["visitor"] = rows[line] = {"stage": line[len("[visitor] "):].strip() + " (the visitor's race)",
                                            "start_s": round(t, 1), "end_s": None}
            continue
        if not line.startswith("[arena] ") or line.startswith("[arena]   "):  # indented: a summary line
            continue
        message = line[len("[arena] "):].strip()
        stage = _TAIL.sub("", message).strip()
        if stage in ("ready",) or stage.startswith("error:"):
            continue
        row = rows.setdefault(stage, {"stage": stage, "start_s": round(t, 1), "end_s": None})
        if _DONE.search(message):
            row["end_s"] = round(t, 1)
    rows.pop("visitor", None)
    return sorted(rows.values(), key=lambda r: r["start_s"])


def print_timeline(rows: list[dict], times: dict, lines: int) -> None:
    print("| stage | start s | end s |\n|---|---|---|")
    for r in rows:
        end = "" if r["end_s"] is None else f"{r['end_s']:.1f}"
        print(f"| {r['stage'][:110]} | {r['start_s']:.1f} | {end} |")
    for key, label in (("page_up_s", "page answers; the visitor presses Run"), ("first_token_s", "**first tokens**"),
                       ("first_race_done_s", "the visitor's race done"), ("ready_s", "**Ready**"),
                       ("error_s", "error")):
        if key in times:
            print(f"| {label} | {times[key]:.1f} | |")
    print(f"| log lines | {lines} | |", flush=True)


STATUS = 4  # the race's outputs: baseline output and stats, speculative output and stats, then the status line


def visitor(url: str, t0: float, times: dict, stop: threading.Event, seen: list) -> None:
    """Race once as soon as the page is up; note the first token, the end, and each new text of
    the visitor's status line (its race's own stages: the app's log does not show them)."""
    from gradio_client import Client

    while not stop.is_set():
        try:
            urllib.request.urlopen(url, timeout=2).read(1)
            break
        except OSError:
            time.sleep(0.5)
    if stop.is_set():
        return
    times["page_up_s"] = time.time() - t0
    client = Client(url, verbose=False, download_files=False)  # its files are not needed (and it leaves folders in /tmp)
    preset = load_presets().default
    job = client.submit(PROMPT, preset, "CPU", "CPU", "draft model", 4, False, 0.4, 32, False, 0.7, 0.9, False,
                        "race: both at once", 0, 0, api_name="/race")
    while not job.done() and not stop.is_set():
        outputs = job.outputs()
        status = re.sub(r"<[^>]+>", "", str(outputs[-1][STATUS])).strip() if outputs else ""
        if status and (not seen or seen[-1][1] != f"[visitor] {status}"):
            seen.append((time.time() - t0, f"[visitor] {status}"))
        if outputs and "first_token_s" not in times and 'data-tokens="' in str(outputs[-1][1]):
            times["first_token_s"] = time.time() - t0
        time.sleep(0.2)
    if job.done():
        try:
            job.result()
            times["first_race_done_s"] = time.time() - t0
        except Exception as e:  # the race's own error, reported, not fatal to the timing
            times["first_race_error"] = str(e)[:200]
    client.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cache_dir")
    ap.add_argument("--port", default="7860")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-race", action="store_true", help="only time the log (no visitor)")
    ap.add_argument("--limit-s", type=float, help="stop the app after this many seconds (the timeline so far is printed)")
    ap.add_argument("--no-profiles", action="store_true", help="the app measures this machine whole (app.py --no-profiles)")
    args = ap.parse_args(argv)
    t0 = time.time()
    app = subprocess.Popen([sys.executable, "-u", str(ROOT / "app.py"), "--cache-dir", args.cache_dir,
                            "--port", args.port, *(["--no-profiles"] if args.no_profiles else [])], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    times: dict = {}
    seen: list = []  # (seconds, "[visitor] status") of the visitor's race
    stop = threading.Event()
    if not args.no_race:
        threading.Thread(target=visitor, args=(f"http://127.0.0.1:{args.port}/", t0, times, stop, seen),
                         daemon=True).start()
    if args.limit_s:  # a shared machine's time slot: stop, and still print what was timed
        watchdog = threading.Timer(args.limit_s, lambda: app.poll() is None and os.killpg(app.pid, signal.SIGTERM))
        watchdog.daemon = True
        watchdog.start()
    fresh = not any(Path(args.cache_dir).glob("models/*"))
    lines, ready, log = 0, False, []
    try:
        for line in app.stdout:
            lines += 1
            log.append((time.time() - t0, line.rstrip()))
            print(f"{time.time() - t0:7.1f}s {line.rstrip()[:200]}", flush=True)
            if line.strip().endswith("ready") or "error:" in line:
                ready = line.strip().endswith("ready")
                times["ready_s" if ready else "error_s"] = time.time() - t0
                break
    finally:
        stop.set()
        os.killpg(app.pid, signal.SIGTERM)
    info = machine_info()
    rows = timeline(sorted(log + seen, key=lambda x: x[0]))
    result = {**{k: round(v, 1) if isinstance(v, float) else v for k, v in times.items()}, "log_lines": lines,
              "first_launch": fresh, "profiles": not args.no_profiles, "timeline": rows, "machine": info}
    print_timeline(rows, times, lines)
    print(json.dumps({k: v for k, v in result.items() if k not in ("machine", "timeline")}), flush=True)
    print(f"CPU: {info['cpu_model']}; {' '.join(info['isa_flags'])}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
