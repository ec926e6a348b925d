"""A stranger's script against the page, while a visitor at another address races (issue 57).

    python scripts/stranger_script.py --serve app --json bench-results/stranger-app.json
    python scripts/stranger_script.py --serve cluster --json bench-results/stranger-cluster.json

Starts the page itself, as on a Hugging Face Space (SPACE_ID set, so each client's address is
read from X-Forwarded-For as the platform's proxy sends it): `python app.py` or the Ray Serve
cluster (`python -m demo.serve --address local`), with the preset given (default the SmolLM2
test fixture, which must be prepared: `python -m demo.prepare --preset smollm2-self-draft`).
Once the page answers and a first race has loaded the pair, one address runs every abuse at
once for --seconds:

- raw `/queue/join` races, each with a new session; raw `/call/race`; `/gradio_api/api/race`;
  `/run/race` (the REST shortcut past the queue);
- forged X-Forwarded-For entries to the left of its own address;
- 1,000-file uploads; 900 KB session hashes; 300 idle heartbeat streams;

and, meanwhile, a visitor at another address races (gradio_client, 32 new tokens) again and
again. It prints and writes: what each abuse was answered (status counts), the visitor's
races (how many finished, seconds each), and the server's memory (resident set of the server
process and its children, before and at most during the abuse).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRANGER, VISITOR = "93.184.216.34", "93.184.216.35"
PROMPT = "Write a Python function that reverses a string."


def race_args(preset: str, max_new_tokens: int) -> list:
    return [PROMPT, preset, "CPU", "CPU", "draft model", 4, False, 0.4, max_new_tokens, False, 0.7, 0.9, False,
            "race: both at once", 0, 0]


def send(url: str, body=None, address: str = STRANGER, content_type: str = "application/json",
         method: str | None = None) -> int:
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": content_type, "X-Forwarded-For": address})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            r.read(65536)
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0  # refused or reset: counted as no answer


def rss_bytes(pid: int) -> int:
    """Resident bytes of a process and all its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(serve: str, preset: str, port: int) -> subprocess.Popen:
    env = dict(os.environ, SPACE_ID="tests/stranger-script", HF_HUB_OFFLINE="1")
    if serve == "app":
        cmd = [sys.executable, "app.py", "--preset", preset, "--port", str(port), "--no-calibrate"]
    else:
        cmd = [sys.executable, "-m", "demo.serve", "--address", "local", "--preset", preset, "--port", str(port)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def wait_until_up(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if send(url + "config", method="GET", address=VISITOR) == 200:
            return
        time.sleep(1)
    raise SystemExit(f"the page at {url} did not answer within {timeout_s:.0f} s")


def visitor_race(url: str, preset: str, tokens: int) -> float:
    from gradio_client import Client

    client = Client(url, headers={"X-Forwarded-For": VISITOR}, verbose=False)
    try:
        t = time.perf_counter()
        job = client.submit(*race_args(preset, tokens), api_name="/race")
        job.result(timeout=600)
        return time.perf_counter() - t
    finally:
        client.close()


class Abuse:
    def __init__(self, url: str, preset: str, race_index: int):
        self.url, self.preset, self.race_index = url, preset, race_index
        self.answers: dict[str, Counter] = {}
        self.stop = threading.Event()
        self.sockets: list = []

    def count(self, what: str, code: int) -> None:
        self.answers.setdefault(what, Counter())[code] += 1

    def loop(self, what: str, once) -> None:
        while not self.stop.is_set():
            self.count(what, once())

    def forged(self) -> str:
        return f"{random.randint(1, 223)}.{random.randint(0, 255)}.7.7, {STRANGER}"

    def kinds(self) -> dict:
        u, race = self.url, race_args(self.preset, 512)
        files = b"".join(b"--B\r\nContent-Disposition: form-data; name=\"files\"; filename=\"r.json\"\r\n\r\n{}\r\n"
                         for _ in range(1000)) + b"--B--\r\n"
        return {
            "queue/join, a new session each": lambda: send(u + "gradio_api/queue/join", {
                "data": race, "fn_index": self.race_index, "session_hash": uuid.uuid4().hex}),
            "call/race": lambda: send(u + "gradio_api/call/race", {"data": race}),
            "api/race": lambda: send(u + "gradio_api/api/race", {"data": race}),
            "run/race": lambda: send(u + "gradio_api/run/race", {"data": race}),
            "call/race, forged X-Forwarded-For": lambda: send(u + "gradio_api/call/race", {"data": race},
                                                              address=self.forged()),
            "1,000-file upload": lambda: send(u + "gradio_api/upload", files,
                                              content_type="multipart/form-data; boundary=A; boundary=B"),
            "900 KB session hash": lambda: send(u + "gradio_api/queue/join", {
                "data": race, "fn_index": self.race_index, "session_hash": "a" * 900_000}),
            "process_recording": lambda: send(u + "gradio_api/process_recording", b"{}"),
        }

    def idle_streams(self, n: int) -> Counter:
        host, port = self.url.split("//")[1].rstrip("/").split(":")
        codes: Counter = Counter()
        tab = uuid.uuid4().hex[:11]
        for _ in range(n):
            try:
                s = socket.create_connection((host, int(port)), timeout=10)
                s.sendall(f"GET /gradio_api/heartbeat/{tab} HTTP/1.1\r\nHost: {host}\r\n"
                          f"X-Forwarded-For: {STRANGER}\r\n\r\n".encode())
                codes[int(s.recv(64).split(b" ")[1])] += 1
                self.sockets.append(s)
            except (OSError, IndexError, ValueError):
                codes[0] += 1
        return codes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serve", choices=["app", "cluster"], default="app")
    ap.add_argument("--preset", default="smollm2-self-draft")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the abuse runs (default 60)")
    ap.add_argument("--tokens", type=int, default=32, help="the visitor's new tokens a race (default 32)")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    server = start(args.serve, args.preset, port)
    try:
        wait_until_up(url, 900)
        config = json.loads(urllib.request.urlopen(url + "config", timeout=30).read())
        race_index = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "race")
        first = visitor_race(url, args.preset, args.tokens)  # loads the pair: the baseline for memory
        alone = [visitor_race(url, args.preset, args.tokens) for _ in range(2)]
        before = rss_bytes(server.pid)
        abuse = Abuse(url, args.preset, race_index)
        threads = [threading.Thread(target=abuse.loop, args=(what, once), daemon=True)
                   for what, once in abuse.kinds().items()]
        for t in threads:
            t.start()
        streams = abuse.idle_streams(300)
        peak, races = before, []
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            races.append(visitor_race(url, args.preset, args.tokens))
            peak = max(peak, rss_bytes(server.pid))
        abuse.stop.set()
        for t in threads:
            t.join(60)
        peak = max(peak, rss_bytes(server.pid))
        for s in abuse.sockets:
            s.close()
    finally:
        os.killpg(server.pid, 15)
        server.wait(60)
    result = {
        "serve": args.serve, "preset": args.preset, "seconds": args.seconds, "date": time.strftime("%Y-%m-%d"),
        "cpu_flags": cpu_flags(),
        "visitor_first_race_s": round(first, 2), "visitor_races_alone_s": [round(x, 2) for x in alone],
        "visitor_races_under_abuse_s": [round(x, 2) for x in races],
        "answers": {what: dict(c) for what, c in abuse.answers.items()},
        "idle_streams": dict(streams),
        "rss_before_mb": round(before / 2**20), "rss_peak_mb": round(peak / 2**20),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    import re

    return " ".join(sorted(set(re.findall(r"\b(avx512[a-z_0-9]*|amx[a-z_0-9]*|avx_vnni|avx2)\b", text))))


if __name__ == "__main__":
    sys.exit(main())
