"""calibrate()'s named steps, each on made-up measurements (no OpenVINO, no child process): the
state they read and fill (demo.calibrate.state) is plain data, and the stage runner is a fake
that returns what a timing would have measured."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from demo.calibrate import calibration
from demo.calibrate.plan import FULL
from demo.calibrate.state import Found, Setup
from demo.core.errors import DemoError


class FakeStages:
    """Returns a real pipeline's timing without running one: no overhead beyond the model's,
    and, for a race (a baseline `beside`), the baseline's rates as it raced."""

    done: set = set()

    def __init__(self, race_baseline_rates=(30.0, 32.0)):
        self.names = []
        self.race_baseline_rates = list(race_baseline_rates)

    def run(self, name, function, args, what):
        self.names.append(name)
        timing = {"per_step_s": 0.0, "per_guess_s": 0.0, "extra_s": {}, "baseline_overhead_s": 0.0}
        return {**timing, "baseline_rates": self.race_baseline_rates} if "beside" in args else timing


def setup(stages=None, budget=1 << 40, k_max=3) -> Setup:
    folders = {("main", "m"): Path("m"), ("main", "n"): Path("n"), ("draft", "d"): Path("d")}
    return Setup(SimpleNamespace(name="made-up"), None, ["m", "n"], ["d"], k_max, ["a prompt"], 16, budget, FULL,
                 {"fair": None, "race": 1}, folders, stages or FakeStages(), lambda message: None, None, None)


def found(k_max=3) -> Found:
    main = {"verify_s": {"fair": [0.05] * (k_max + 1), "race": [0.08] * (k_max + 1)}, "memory_bytes": 1 << 30,
            "dominated": False}
    mains = {"m": main, "n": {**main, "verify_s": {"fair": [0.07] * (k_max + 1), "race": [0.1] * (k_max + 1)}}}
    return Found(drafts={"d": {"step_s": {"fair": 0.01, "race": 0.015}, "memory_bytes": 1 << 28}},
                 mains=mains, usable_mains=mains, runs={("m", "d"): [[2, 1, 0]], ("n", "d"): [[2, 1, 0]]},
                 precision={"choice": "f32"},
                 plain={"fair": {"rates": {"m": [20.0, 21.0], "n": [14.0, 15.0]}},
                        "race": {"rates": {"m": [10.0, 11.0], "n": [7.0, 7.5]}}},
                 plain_pick={mode: {"main_format": "m", "ties": ["m"], "baseline_tok_s": 1.0} for mode in ("fair", "race")})


def test_a_timed_k_keeps_the_overhead_its_real_pipeline_measured():
    # The model's step at K=2: 2 guesses of 0.01 s and a verify of 0.05 s, plus the real pipeline's
    # extra. A line through other K says 0.02 s; the pipeline timed at K=2 itself added none.
    timing = {"per_step_s": 0.02, "per_guess_s": 0.0, "extra_s": {"2": 0.0}, "baseline_overhead_s": 0.0}
    pool = calibration.candidates_for(setup(), found(), "fair", lambda pair: timing)
    step = {(c["main_format"], c["k"]): c["step_s"] for c in pool}
    assert step[("m", 2)] == pytest.approx(2 * 0.01 + 0.05)
    assert step[("m", 3)] == pytest.approx(3 * 0.01 + 0.05 + 0.02)


def test_a_race_holds_the_baseline_main_too_and_what_does_not_fit_is_refused():
    s = setup(budget=(1 << 30) + (1 << 28))  # fair mode's main and draft, nothing more
    f = found()
    fair = calibration.fitting(s, calibration.candidates_for(s, f, "fair", lambda pair: None))
    assert fair and all(c["memory_bytes"] == (1 << 30) + (1 << 28) for c in fair)
    with pytest.raises(DemoError, match="fits in"):
        calibration.fitting(s, calibration.candidates_for(s, f, "race", lambda pair: None))


def test_weight_files_too_big_for_the_budget_are_refused_before_any_stage(tmp_path):
    folders = {}
    for (role, fmt), size in {("main", "m"): 600, ("main", "n"): 900, ("draft", "d"): 500}.items():
        (tmp_path / fmt).mkdir()
        (tmp_path / fmt / "openvino_model.bin").write_bytes(b"\0" * size)
        folders[(role, fmt)] = tmp_path / fmt
    stages = FakeStages()
    for budget, refused in ((1099, True), (1100, False)):  # the smallest main (600) and draft (500)
        s = setup(stages, budget=budget)
        s.folders = folders
        if refused:
            with pytest.raises(DemoError, match="fits in"):
                calibration.refuse_when_no_pair_can_fit(s)
        else:
            calibration.refuse_when_no_pair_can_fit(s)
    assert stages.names == []


def test_each_mode_s_baseline_rate_is_the_one_it_ran_at():
    stages = FakeStages(race_baseline_rates=(30.0, 32.0))
    chosen = calibration.choose(setup(stages), found())
    assert chosen.choice["fair"]["main_format"] == "m"  # the faster main, with the same draft
    assert chosen.baseline["fair"] == {"main_format": "m", "attention": "PA", "baseline_tok_s": 20.5}
    assert chosen.baseline["race"]["baseline_tok_s"] == 31.0  # beside the chosen pair, not alone
    assert stages.names == ["overhead:fair:m/d", "overhead:race:m/d"]


def test_a_plain_configuration_clearly_faster_on_sdpa_is_the_baseline_and_the_log_says_so():
    said = []
    s = setup()
    s.report = said.append
    pick = calibration.pick_plain(s, {"rates": {"m": [20.0, 20.0], "m+SDPA": [22.0, 23.0]}}, "fair", ["m"])
    assert pick["main_format"] == "m+SDPA"
    assert "the baseline runs on it" in said[0]


def test_no_plain_rate_at_all_is_one_sentence():
    with pytest.raises(DemoError, match="No main format of 'made-up' runs alone on this CPU with race threads"):
        calibration.pick_plain(setup(), {"rates": {"m": [], "n": []}}, "race", ["m", "n"])


class PlainStages(FakeStages):
    """Times plain pipelines: with the whole machine, int4 on the stateful backend far ahead."""

    done = {"plain:fair"}  # as after a restart: no llama.cpp reference to assemble

    def run(self, name, function, args, what):
        self.names.append(name)
        self.args = {**getattr(self, "args", {}), name: args}
        if name == "plain:fair":
            return {"rates": {"m": [20.0, 20.0], "m+SDPA": [30.0, 30.0], "n": [17.0, 17.0], "n+SDPA": [17.0, 17.0]}}
        return {"rates": {f: [10.0, 10.0] for f in args["folders"]}}


def test_race_threads_time_every_main_close_to_the_fastest_on_paged_attention():
    # A race keeps the scheduler on both sides, so what is "close to the fastest" with race threads
    # is read among paged-attention rates only: n (17) is within 1/1.25 of m on paged attention (20),
    # though not of m on the stateful backend (30).
    stages = PlainStages()
    f = found()
    calibration.time_plain(setup(stages), f)
    assert sorted(stages.args["plain:race"]["folders"]) == ["m", "n"]
    assert f.plain_pick["fair"]["main_format"] == "m+SDPA"  # 1.5× in every pair: clearly faster
