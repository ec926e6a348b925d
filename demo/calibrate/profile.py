"""CPU-class profiles: what calibration chose on a CPU class the project has measured, shipped
in demo/calibrate/profiles/, so a launch on a known class converts only the formats its
profile chose and confirms the profile's decision here instead of measuring from scratch.

A profile is written from a real calibration by one command, never by hand:

    python -m demo.calibrate.profile write CALIBRATION.json   # from bench-results/ or the cache

It keeps the calibration whole (what the page explains a race with), the class it was
measured on, the decisions it made, and the file it came from with its checksum; a test
fails when a profile and that file disagree.

The class is what decides OpenVINO's kernels, as far as the calibration recorded it: the
CPU's vendor, family and model number (recorded since 2026-12-07; an older calibration keys
on the model name alone), its ISA flags, cores, OpenVINO's version, the calibration's version.
Memory is left out: it sets the budget, not the kernels, and it differs by a few MB between
two boxes of one class.

The confirmation (confirm): the profile's baseline for fair mode (the configuration every
headline speedup is read against) and its runner-up, timed in their real pipelines on this
machine, interleaved, CONFIRM_PAIRS paired samples, judged by CONFIRM_BAR below. Why eight:
the fewest pairs whose sign test can set a profile aside at 95 % (with six, only all six
against it would; with four, nothing could). Eight pairs of 32 tokens take about 32 s on a
Zen 4 (loading the two pipelines another 20 s): a fifth of measuring the formats from scratch.
"""

from __future__ import annotations

import argparse
import hashlib
from math import comb
import json
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from ..core.errors import DemoError
from ..core.files import write_atomic
from ..models.calibration_result import Calibration, Origin, plain_key, plain_words, split_plain_key
from ..models.calibration_store import CALIBRATION_VERSION, cache_path, fingerprint
from .cost_model import TIE_MARGIN, paged_unless_clearly_slower, plain_choice
from .plan import launch_formats

PROFILE_VERSION = 1
PROFILES_DIR = Path(__file__).with_name("profiles")
REPO_ROOT = Path(__file__).resolve().parents[2]
# The fingerprint's keys that name a CPU class (demo.core.machine.fingerprint), memory left out.
CLASS_KEYS = ("cpu_vendor", "cpu_family", "cpu_model", "cpu", "isa_flags", "cores", "openvino")
CONFIRM_MODE = "fair"
CONFIRM_PAIRS = 8
CONFIRM_NEW_TOKENS = 32


# -- what a profile holds --------------------------------------------------------------

def cpu_class(fp: dict) -> dict:
    """The class a fingerprint belongs to: the keys it recorded of CLASS_KEYS."""
    return {k: fp[k] for k in CLASS_KEYS if fp.get(k) is not None}


def runner_up(rates: dict, chosen: str) -> Optional[str]:
    """The plain configuration calibration's own rule (plain_choice, then the paged-attention
    rule) picks when `chosen` is left out: the one a confirmation times it against."""
    others = {k: v for k, v in rates.items() if k != chosen and v}
    if not others:
        return None
    return paged_unless_clearly_slower(plain_choice(others), others)["main_format"]


# A confirmation asks whether the profile's baseline is still the fastest plain configuration
# here, what the race's honesty rests on, not slower than calibration can tell apart
# (cost_model.TIE_MARGIN); it does not retry calibration's tie-break between two backends
# (the stateful one only where it wins by 5 % in every pair: about answers parting sooner,
# not speed). These 2-core boxes are noisy: one pair's ratio ranged 0.61-1.96 over five Zen 4
# launches (40 pairs; medians 1.06-1.12), so a bar on the median itself would send many
# launches on a near tie to measuring whole (Ready 445 s instead of ~215 s). So the profile is
# set aside only when the median's distribution-free upper bound (CONFIDENCE, one-sided: the
# order statistic a sign test gives) is below the bar: with eight pairs, when the runner-up ran
# faster than the bar in at least seven. Whatever the spread, a baseline as fast as its
# runner-up is set aside in at most 9/256 of launches (1 in 28).
CONFIRM_BAR = 1 - TIE_MARGIN
CONFIDENCE = 0.95


def median_upper_bound(ratios: list) -> float:
    """The smallest order statistic x(n-d+1) with P(Binomial(n, 1/2) < d) <= 1 - CONFIDENCE:
    the true median is below it with at least CONFIDENCE (for n = 8, the second largest)."""
    n = len(ratios)
    d = 0
    while d < n and sum(comb(n, i) for i in range(d + 1)) / 2 ** n <= 1 - CONFIDENCE:
        d += 1
    return sorted(ratios)[n - d] if d else float("inf")  # too few pairs to ever set a profile aside


def decisions(result: Calibration) -> dict:
    """What the calibration decided, in a profile's terms: the weight formats a launch
    converts, the pair and K per mode, the activation precision, each mode's baseline, and
    fair mode's runner-up with the paired ratios calibration read between the two."""
    fair = result.plain.get(CONFIRM_MODE)
    base = result.baseline.get(CONFIRM_MODE)
    if fair is None or base is None:
        raise DemoError("This calibration has no timed baseline in fair mode (an older version); "
                        "a profile needs one: calibrate again with python -m demo.calibrate.")
    chosen = plain_key(base.main_format, base.attention)
    second = runner_up(fair.rates, chosen)
    if second is None:  # nothing to time it against: a launch could never confirm it
        raise DemoError("This calibration timed one plain configuration in fair mode, so a launch could not "
                        "confirm its baseline against another; calibrate with more formats, then write its profile.")
    ratios = [a / b for a, b in zip(fair.rates.get(chosen, []), fair.rates[second]) if b > 0]
    mains = [c.main_format for c in result.choice.values()] + [b.main_format for b in result.baseline.values()]
    mains.append(split_plain_key(second)[0])
    return {
        "main_formats": list(dict.fromkeys(mains)),
        "draft_formats": list(dict.fromkeys(c.draft_format for c in result.choice.values())),
        "choice": {m: {"main": c.main_format, "draft": c.draft_format, "k": c.k} for m, c in result.choice.items()},
        "precision": result.precision.choice if result.precision is not None else "f32",
        "baseline": {m: plain_key(b.main_format, b.attention) for m, b in result.baseline.items()},
        "runner_up": second,
        "paired_ratios": [round(r, 4) for r in ratios],
    }


def build(calibration_path: Path, root: Path = REPO_ROOT) -> dict:
    """A profile from a saved calibration (its JSON as written by calibrate or --json), which
    it names by its path under `root` (the repository)."""
    text = calibration_path.read_text()
    result = Calibration.model_validate(json.loads(text))
    if result.calibration_version != CALIBRATION_VERSION:
        raise DemoError(f"{calibration_path} is calibration version {result.calibration_version}, and this code "
                        f"reads version {CALIBRATION_VERSION}; calibrate again, then write its profile.")
    try:
        source = str(calibration_path.resolve().relative_to(root.resolve()))
    except ValueError:
        raise DemoError(f"{calibration_path} is outside the repository: copy it into bench-results/ (a profile "
                        "names the file it came from), then write its profile from there.") from None
    missing = [f for f in launch_formats(result.fingerprint.isa_flags)[0] if f not in result.main]
    if missing:  # its baseline could be slower than a format today's launch would have found faster
        raise DemoError(f"{calibration_path} did not measure {', '.join(missing)}, which a launch on its CPU class "
                        "measures now; a profile from it could race a baseline slower than this class's fastest: "
                        "calibrate again, then write its profile.")
    record = result.to_dict()
    record.pop("path", None)
    record.pop("origin", None)
    return {"profile_version": PROFILE_VERSION, "cpu_class": {**cpu_class(record["fingerprint"]),
                                                            "calibration_version": result.calibration_version},
            "preset": result.preset, "models": result.fingerprint.models,
            "source": source, "source_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "measured_at": time.strftime("%Y-%m-%d", time.gmtime(result.started_at)),
            "decisions": decisions(result), "calibration": record}


def profile_name(profile: dict) -> str:
    c = profile["cpu_class"]
    if c.get("cpu_family") is not None:
        cpu = f"{c.get('cpu_vendor', 'cpu')}-{c['cpu_family']}-{c.get('cpu_model')}"
    else:  # an older calibration: the model name and a short hash of the flags tell classes apart
        cpu = (c.get("cpu") or "cpu") + "-" + hashlib.sha256(" ".join(c.get("isa_flags", [])).encode()).hexdigest()[:6]
    slug = "".join(ch if ch.isalnum() else "-" for ch in f"{profile['preset']}-{cpu}-{c.get('cores')}c").lower()
    return "-".join(filter(None, slug.split("-"))) + ".json"


def write(calibration_path: Path, out_dir: Path = PROFILES_DIR, root: Path = REPO_ROOT) -> Path:
    profile = build(calibration_path, root)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_atomic(out_dir / profile_name(profile), json.dumps(profile, indent=1, sort_keys=True) + "\n")


def load_all(directory: Path = PROFILES_DIR) -> list[dict]:
    """Every profile shipped (a damaged file is skipped: the launch then measures, as without one)."""
    found = []
    for path in sorted(directory.glob("*.json")):
        try:
            profile = json.loads(path.read_text())
            if profile.get("profile_version") == PROFILE_VERSION:
                found.append({**profile, "file": path.name})
        except (OSError, ValueError):
            continue
    return found


def matching(preset, store, directory: Path = PROFILES_DIR) -> Optional[dict]:
    """The profile of this machine's class for `preset` (its models too), or None."""
    fp = fingerprint(preset, store)
    here = {**cpu_class(fp), "calibration_version": CALIBRATION_VERSION}
    for profile in load_all(directory):
        wanted = profile["cpu_class"]
        if (profile["preset"] == preset.name and profile["models"] == fp["models"]
                and all(here.get(k) == v for k, v in wanted.items())):
            return profile
    return None


# -- confirming it on this machine -----------------------------------------------------

def verdict(profile: dict, rates: dict) -> Origin:
    """This machine's paired samples of the profile's fair baseline and runner-up, judged."""
    d = profile["decisions"]
    chosen, other = d["baseline"][CONFIRM_MODE], d["runner_up"]
    ratios = [a / b for a, b in zip(rates[chosen], rates[other]) if b > 0]
    return Origin(profile=profile["file"], source=profile["source"], measured_at=profile["measured_at"],
                  mode=CONFIRM_MODE, chosen=chosen, runner_up=other, ratios=ratios, bar=CONFIRM_BAR, rates=rates,
                  confirmed=bool(ratios) and median_upper_bound(ratios) >= CONFIRM_BAR)


def confirm(profile: dict, preset, store, report: Callable[[str], None], runner) -> Origin:
    """Time the profile's fair baseline against its runner-up here (a stage in a child, in
    `runner`: demo.calibrate.stages.StageRunner) and judge the paired samples."""
    from ..core.bench_prompts import CALIBRATION_SET, named

    d = profile["decisions"]
    chosen, other = d["baseline"][CONFIRM_MODE], d["runner_up"]
    keys = [chosen, other]
    folders = {}
    for key in keys:
        fmt = split_plain_key(key)[0]
        folder = store.ready_path(preset.main, fmt)
        if folder is None:
            raise DemoError(f"The main model as {fmt} is not prepared, so the profile cannot be confirmed.")
        folders[fmt] = str(folder)
    texts = [p.text for p in named(CALIBRATION_SET)]
    rounds = -(-CONFIRM_PAIRS // len(texts))
    args = {"folders": folders, "texts": texts, "max_new_tokens": CONFIRM_NEW_TOKENS,
            "threads": profile["calibration"]["threads"].get(CONFIRM_MODE), "rounds": rounds,
            "precision": d["precision"], "attentions": sorted({split_plain_key(k)[1] for k in keys}),
            "only": keys}
    what = f"confirming this CPU class's profile: {plain_words(chosen)} against {plain_words(other)}, in turn"
    measured = runner.run("confirm_profile", "measure_plain", args, what)
    return verdict(profile, {k: measured["rates"][k] for k in keys})


def from_profile(profile: dict, preset, store, origin: Origin, started: float) -> Calibration:
    """The profile's calibration, saved as this machine's, with where it came from (`origin`)."""
    record = dict(profile["calibration"])
    record.update(fingerprint=fingerprint(preset, store), started_at=started,
                  duration_s=round(time.time() - started, 1), origin=origin.model_dump())
    result = Calibration.model_validate(record)
    path = write_atomic(cache_path(store, preset.name, record["fingerprint"]), result.to_json())
    return result.model_copy(update={"path": str(path)})


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m demo.calibrate.profile",
                                 description="Write a CPU-class profile from a saved calibration.")
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write demo/calibrate/profiles/<class>.json from a calibration JSON")
    w.add_argument("calibration", type=Path, help="a calibration JSON inside the repository (bench-results/)")
    sub.add_parser("list", help="the profiles shipped, one line each")
    args = ap.parse_args(argv)
    try:
        if args.command == "write":
            path = write(args.calibration)
            print(f"wrote {path.relative_to(REPO_ROOT)} from {args.calibration}")
        else:
            for p in load_all():
                d = p["decisions"]
                print(f"{p['file']}: {p['source']} ({p['measured_at']}): baseline {d['baseline']}, "
                      f"runner-up {d['runner_up']}, pairs {d['choice']}")
    except (DemoError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
