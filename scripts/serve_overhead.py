"""What does Ray Serve cost? The same races through the single-process page (python app.py)
and through the page on a one-node Ray Serve cluster (python -m demo.serve), interleaved in
one script, plus the idle cost (PSS, CPU) of the cluster's processes.

    python scripts/serve_overhead.py --rounds 4 --json bench-results/serve-overhead-smollm2-DATE.json

Both pages run on this machine at once but race one at a time, alternating which goes first.
Each side of each backend runs with 1 OpenVINO thread (the in-process race splits 2 cores in
two; each pipeline replica reserves 1 CPU). Per race and side it records:

* what the page itself reports (tok/s and TTFT measured where the tokens are made), which
  says whether generation got slower;
* what a visitor sees, timed at the gradio_client: submit -> the side's first token on the
  page (TTFT), and tokens / (submit -> the side shown done), which includes every hop.

Needs `pip install -r requirements-serve.txt` and the SmolLM2 fixture.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

PRESET = "smollm2-self-draft"
SIDES = ("baseline", "speculative")
OUTPUTS = ["baseline", "baseline_stats", "speculative", "speculative_stats", "status", "summary", "chart"]
CLK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the cluster's processes ------------------------------------------------------------------

def descendants(root: int) -> list[int]:
    children: dict = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def role(pid: int) -> str:
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    for key, name in (("ServeReplica:arena:Baseline", "replica Baseline"),
                      ("ServeReplica:arena:Speculative", "replica Speculative"),
                      ("ServeReplica:arena:Race", "replica Race"), ("ServeReplica:arena:Page", "replica Page"),
                      ("ServeController", "serve controller"), ("ProxyActor", "serve proxy"),
                      ("gcs_server", "gcs_server"), ("raylet", "raylet"), ("IDLE", "idle worker"),
                      ("log_monitor", "log monitor"), ("agent", "agents"), ("monitor", "monitor")):
        if key in cmd:
            return name
    return "other: " + cmd[:60]


def pss_kb(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/smaps_rollup"):
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_ticks(pid: int) -> int:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def cpu_by_role() -> dict:
    """CPU ticks so far of this process ("driver": the in-process app and the client) and of
    each role among its descendants (the cluster)."""
    out = {"driver": cpu_ticks(os.getpid())}
    for p in descendants(os.getpid()):
        r = role(p)
        out[r] = out.get(r, 0) + cpu_ticks(p)
    return out


def idle_cost(window_s: float) -> dict:
    """PSS and CPU (cores, averaged over `window_s`) of this process's descendants, by role."""
    pids = descendants(os.getpid())
    before = {p: cpu_ticks(p) for p in pids}
    time.sleep(window_s)
    roles: dict = {}
    for p in pids:
        r = role(p)
        if r == "gone":
            continue
        entry = roles.setdefault(r, {"processes": 0, "pss_mb": 0.0, "cpu_cores": 0.0})
        entry["processes"] += 1
        entry["pss_mb"] += pss_kb(p) / 1024
        entry["cpu_cores"] += (cpu_ticks(p) - before[p]) / CLK / window_s
    for entry in roles.values():
        entry["pss_mb"] = round(entry["pss_mb"], 1)
        entry["cpu_cores"] = round(entry["cpu_cores"], 4)
    replicas = [v for k, v in roles.items() if k.startswith("replica")]
    infra = [v for k, v in roles.items() if not k.startswith("replica")]
    total = lambda xs, k: round(sum(x[k] for x in xs), 3)  # noqa: E731
    return {"window_s": window_s, "by_role": roles,
            "ray_infrastructure": {"pss_mb": total(infra, "pss_mb"), "cpu_cores": total(infra, "cpu_cores")},
            "replicas": {"pss_mb": total(replicas, "pss_mb"), "cpu_cores": total(replicas, "cpu_cores")}}


# -- one race through a page ------------------------------------------------------------------

def race_once(client, prompt: str, k: int, max_new_tokens: int) -> dict:
    args = (prompt, PRESET, "CPU", "CPU", "draft model", k, False, 0.4, max_new_tokens, False, 0.7, 0.9, False,
            "race: both at once", 0, 0)
    t0 = time.perf_counter()
    job = client.submit(*args, api_name="/race")
    first, done, last = {}, {}, {}
    for out in job:  # each page update as it arrives
        now = time.perf_counter()
        for name, value in zip(OUTPUTS, out):
            if isinstance(value, str):
                last[name] = value
        for side in SIDES:
            html = last.get(f"{side}_stats", "")
            tokens = re.search(r'data-tokens="(\d+)"', html)
            if tokens and int(tokens.group(1)) > 0 and side not in first:
                first[side] = now
            if 'data-state="done"' in html and side not in done:
                done[side] = now
    job.result(timeout=5)
    for name, value in zip(OUTPUTS, job.outputs()[-1]):
        if isinstance(value, str):
            last[name] = value
    row = {}
    for side in SIDES:
        html = last[f"{side}_stats"]
        tokens = int(re.search(r'data-tokens="(\d+)"', html).group(1))
        ttft = re.search(r"<b>(\d+) ms</b> TTFT", html)
        row[side] = {
            "tokens": tokens,
            "page_tok_s": float(re.search(r'data-tokens-per-s="([\d.]+)"', html).group(1)),
            "page_ttft_ms": int(ttft.group(1)) if ttft else None,
            "client_ttft_ms": round((first[side] - t0) * 1000, 1),
            "client_tok_s": round(tokens / (done.get(side, time.perf_counter()) - t0), 3),
        }
    row["how"] = re.sub(r"<[^>]+>", "", re.search(r'<span class="how">(.*?)</span>', last["summary"]).group(1))
    return row


def summarize(rows: list) -> dict:
    out = {}
    for side in SIDES:
        for key in ("page_tok_s", "page_ttft_ms", "client_tok_s", "client_ttft_ms"):
            xs = [r[side][key] for r in rows if r[side][key] is not None]
            out[f"{side}.{key}"] = {"median": round(statistics.median(xs), 2), "mean": round(statistics.mean(xs), 2),
                                    "stdev": round(statistics.stdev(xs), 2) if len(xs) > 1 else 0.0, "n": len(xs)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds over the prompts (each: both backends)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=4, help="assistant tokens")
    ap.add_argument("--idle-window", type=float, default=30.0, help="seconds over which idle CPU is averaged")
    ap.add_argument("--cache-dir", default=os.environ.get("SPECDEC_CACHE_DIR", str(REPO / ".cache-test")))
    ap.add_argument("--json", type=Path, default=REPO / "bench-results" / f"serve-overhead-smollm2-{datetime.date.today()}.json")
    args = ap.parse_args(argv)

    from gradio_client import Client

    import app
    from demo.core.bench_prompts import select
    from demo.core.machine import machine_info
    from demo.serve import cluster, config as serve_config

    prompts = [p.text for p in select(["code"], 2) + select(["chat"], 1)]
    result: dict = {"machine": machine_info(), "python": platform.python_version(),
                    "settings": {"preset": PRESET, "k": args.k, "max_new_tokens": args.max_new_tokens,
                                 "rounds": args.rounds, "prompts": len(prompts)},
                    "loadavg_start": os.getloadavg()}
    import ray

    result["ray"] = ray.__version__
    conf = serve_config.for_one_machine(serve_config.load(REPO / "serve.yaml"), cores=2)
    conf.args.update(preset=PRESET, cache_dir=args.cache_dir)
    local_page = None
    t = time.perf_counter()
    cluster.start("local", num_cpus=2)  # main thread: the cluster lives as long as it does
    try:
        result["ray_start_s"] = round(time.perf_counter() - t, 1)
        time.sleep(10)
        print("[idle] Ray alone (no Serve yet)", file=sys.stderr, flush=True)
        result["idle_ray_only"] = idle_cost(args.idle_window)
        t = time.perf_counter()
        box: dict = {}
        deploy = threading.Thread(target=lambda: box.update(url=cluster.deploy(conf, port=free_port())), daemon=True)
        deploy.start()
        deploy.join(300)
        if "url" not in box:
            raise SystemExit("the arena was not deployed within 300 s")
        result["deploy_s"] = round(time.perf_counter() - t, 1)
        time.sleep(10)
        print("[idle] the arena deployed, no visitors", file=sys.stderr, flush=True)
        result["idle_arena"] = idle_cost(args.idle_window)

        local_page = app.make_demo(preset=PRESET, cache_dir=args.cache_dir, bench=False, warm=True)
        app.launch(local_page, port=free_port(), prevent_thread_lock=True, quiet=True)
        deadline = time.time() + 120
        while local_page.arena.startup.get()[0] != "ready" and time.time() < deadline:
            time.sleep(0.2)
        clients = {"in-process": Client(local_page.local_url, verbose=False), "serve": Client(box["url"], verbose=False)}
        for name, c in clients.items():  # one warm-up race each, not recorded
            race_once(c, prompts[0], args.k, args.max_new_tokens)
        rows: dict = {name: [] for name in clients}
        cpu: dict = {name: {} for name in clients}  # CPU seconds per role, summed over each backend's races
        order = list(clients)
        for r in range(args.rounds):
            for i, prompt in enumerate(prompts):
                for name in (order if (r + i) % 2 == 0 else order[::-1]):
                    before = cpu_by_role()
                    row = race_once(clients[name], prompt, args.k, args.max_new_tokens)
                    after = cpu_by_role()
                    for k, v in after.items():
                        cpu[name][k] = cpu[name].get(k, 0.0) + (v - before.get(k, 0)) / CLK
                    row.update(round=r, prompt=i)
                    rows[name].append(row)
                    print(f"[{name:10s}] round {r} prompt {i}: " + "  ".join(
                        f"{s} {row[s]['page_tok_s']:.1f} tok/s (client {row[s]['client_tok_s']:.1f}, "
                        f"TTFT {row[s]['client_ttft_ms']:.0f} ms)" for s in SIDES), file=sys.stderr, flush=True)
        result["samples"] = rows
        # Where the CPU went while each backend raced (seconds per race, by process role).
        result["cpu_s_per_race"] = {name: {k: round(v / len(rows[name]), 3) for k, v in sorted(c.items()) if v > 0}
                                    for name, c in cpu.items()}
        result["summary"] = {name: summarize(rs) for name, rs in rows.items()}
        result["serve_vs_in_process"] = {
            key: round(result["summary"]["serve"][key]["median"] / result["summary"]["in-process"][key]["median"], 3)
            for key in result["summary"]["serve"]}
        result["serve_minus_in_process_ms"] = {
            key: round(result["summary"]["serve"][key]["median"] - result["summary"]["in-process"][key]["median"], 1)
            for key in result["summary"]["serve"] if key.endswith("ttft_ms")}
        for c in clients.values():
            c.close()
    finally:
        if local_page is not None:
            local_page.close()
        cluster.stop()
    result["loadavg_end"] = os.getloadavg()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps({"summary": result["summary"], "serve_vs_in_process": result["serve_vs_in_process"],
                      "cpu_s_per_race": result["cpu_s_per_race"],
                      "serve_minus_in_process_ms": result["serve_minus_in_process_ms"],
                      "idle_ray_only": result["idle_ray_only"], "idle_arena": result["idle_arena"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
