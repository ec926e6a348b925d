"""CPU-class profiles (demo.calibrate.profile): each shipped profile is its calibration JSON,
the decisions and the confirmation rule read as calibration's own rules say, and a launch
confirms a profile of this class, falls back (and says so) where this machine contradicts
it, and measures whole on a class it has no profile for."""

import hashlib
import json
import threading
from pathlib import Path

import pytest

from demo.calibrate import calibration, launch, profile
from demo.core.errors import DemoError
from demo.models import calibration_store
from demo.models.calibration_result import Calibration

from .calibrations import made_up
from .test_calibrate import fixture_as_default


def test_every_shipped_profile_is_the_calibration_json_it_names():
    """A profile is written by `python -m demo.calibrate.profile write`, never by hand: each one
    shipped names a calibration JSON in the repository, with its checksum, and writing it again
    from that file gives the very same profile."""
    shipped = profile.load_all()
    assert shipped, "no CPU-class profile is shipped in demo/calibrate/profiles/"
    for p in shipped:
        source = profile.REPO_ROOT / p["source"]
        assert source.is_file(), f"{p['file']} names {p['source']}, which is not in the repository"
        assert hashlib.sha256(source.read_bytes()).hexdigest() == p["source_sha256"], \
            f"{p['source']} changed since {p['file']} was written from it"
        assert {k: v for k, v in p.items() if k != "file"} == json.loads(json.dumps(profile.build(source))), \
            f"{p['file']} does not say what its calibration says: write it again from {p['source']}"
        assert p["file"] == profile.profile_name(p)


RATES = {  # tok/s per (round, prompt), interleaved, as calibration's plain stage records them
    "int4_channel+SDPA": [25.0, 26.0], "int4_channel": [21.0, 19.0],
    "int4_sym+SDPA": [21.0, 20.0], "int4_sym": [19.0, 18.0],
}


def a_calibration(rates=RATES, baseline=("int4_channel", "SDPA"), **fields) -> Calibration:
    return made_up({"fair": ("int4_sym", "int4_sym", 2), "race": ("int4_sym", "gguf", 4)},
                   plain={"fair": {"rates": rates, "interleaved": True}},
                   baseline={"fair": {"main_format": baseline[0], "baseline_tok_s": 25.5, "attention": baseline[1]},
                             "race": {"main_format": "int4_channel", "baseline_tok_s": 13.0}},
                   precision={"choice": "f32", "reason": "measured"},
                   main={f: {"verify_s": {"fair": [0.05] * 5, "race": [0.08] * 5}, "memory_bytes": 1 << 30}
                         for f in ("int4_sym", "gguf", "int4_channel", "f16")},  # every format a launch measures
                   **fields)


def test_a_calibration_that_left_out_a_format_a_launch_measures_makes_no_profile(tmp_path):
    """A Zen 5 launch of 2026-12-05 measured int4_sym alone, before launches timed int4_channel
    too: its profile could race a baseline slower than that class's fastest."""
    with pytest.raises(DemoError, match="did not measure gguf, int4_channel, which a launch on its CPU class"):
        planted(tmp_path, made_up({"fair": ("int4_sym", "int4_sym", 2)}, fingerprint={
            "cpu": "AMD EPYC", "isa_flags": ["avx2", "avx512_vnni"], "cores": 2, "memory_bytes": 1, "openvino": "0",
            "models": {"main": "m", "draft": "d"}}))


def test_a_calibration_with_one_plain_configuration_makes_no_profile(tmp_path):
    with pytest.raises(DemoError, match="timed one plain configuration in fair mode"):
        planted(tmp_path, a_calibration({"int4_channel+SDPA": [25.0, 26.0]}))


def test_decisions_name_the_runner_up_calibrations_own_rule_would_pick():
    """Without int4_channel+SDPA, plain_choice picks int4_sym+SDPA (median 20.5 against
    int4_channel's 20.0), and the paged rule sets it aside: against the fastest paged
    configuration (int4_channel: 21, 19) it ran 1.00× and 1.05×, not 1.05× in every pair."""
    d = profile.decisions(a_calibration())
    assert d["baseline"] == {"fair": "int4_channel+SDPA", "race": "int4_channel"}
    assert d["runner_up"] == "int4_channel"
    assert d["paired_ratios"] == [round(25 / 21, 4), round(26 / 19, 4)]
    assert d["main_formats"] == ["int4_sym", "int4_channel"] and d["draft_formats"] == ["int4_sym", "gguf"]
    assert d["choice"]["fair"] == {"main": "int4_sym", "draft": "int4_sym", "k": 2} and d["precision"] == "f32"


def planted(tmp_path: Path, result: Calibration) -> dict:
    """A profile written, with the real command's code, from `result` saved in tmp_path."""
    (tmp_path / "bench").mkdir(parents=True, exist_ok=True)
    source = tmp_path / "bench" / "calibration.json"
    source.write_text(result.to_json())
    out = tmp_path / "profiles"
    profile.write(source, out, root=tmp_path)
    return profile.load_all(out)[0]


def test_a_profile_is_set_aside_only_when_the_runner_up_was_faster_in_seven_pairs_of_eight(tmp_path):
    """The sign test's bound (one-sided 95 %): with eight pairs, the median is below the second
    largest ratio with probability 1 - 9/256: the profile is set aside when seven pairs or all
    eight read under the bar, and kept on a tie or a median under it with two pairs above."""
    assert profile.median_upper_bound([0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]) == 1.1
    assert profile.median_upper_bound([0.9] * 4) == float("inf")  # four pairs can never decide (1/16 > 5 %)
    p = planted(tmp_path, a_calibration())
    held = profile.verdict(p, {"int4_channel+SDPA": [24, 25, 20, 26, 19, 19, 19, 19],
                               "int4_channel": [20, 20, 21, 21, 20, 20, 20, 20]})
    assert held.confirmed and held.median_ratio() == pytest.approx((0.95 + 20 / 21) / 2)  # four pairs 0.95
    two_up = {"int4_channel+SDPA": [19] * 6 + [21, 21], "int4_channel": [20] * 8}
    assert profile.verdict(p, two_up).confirmed  # 0.95 in six pairs, 1.05 in two
    lost = profile.verdict(p, {**two_up, "int4_channel+SDPA": [19] * 7 + [21]})  # 0.95 in seven
    assert not lost.confirmed and lost.median_ratio() == pytest.approx(0.95)
    assert "confirmed here: int4_channel on the stateful backend (SDPA) ran 0.95× int4_channel (median of 8" \
        in held.words()


@pytest.fixture
def fixture_pair(tmp_path, session_store, smollm2_ir):
    presets, store = fixture_as_default(tmp_path, session_store)
    return presets.get(presets.default), store


def of_this_machine(preset, store, **class_changes) -> Calibration:
    fp = {**calibration_store.fingerprint(preset, store), **class_changes}
    return a_calibration(RATES_FIXTURE, baseline=("gguf", "SDPA"), preset=preset.name, fingerprint=fp)


RATES_FIXTURE = {"gguf+SDPA": [60.0, 62.0], "gguf": [50.0, 51.0]}


def test_a_launch_finds_the_profile_of_its_class_only(fixture_pair, tmp_path):
    preset, store = fixture_pair
    p = planted(tmp_path / "known", of_this_machine(preset, store))
    assert profile.matching(preset, store, tmp_path / "known" / "profiles")["file"] == p["file"]
    assert launch.LaunchCalibrator(profiles_dir=tmp_path / "known" / "profiles").plan(preset, store)["main_formats"] \
        == ["int4_sym", "gguf", "int4_channel"]  # the pair's main, each mode's baseline, the runner-up
    other = of_this_machine(preset, store, cpu_family=(calibration_store.fingerprint(preset, store)
                                                       .get("cpu_family") or 0) + 1)
    planted(tmp_path / "other", other)
    assert profile.matching(preset, store, tmp_path / "other" / "profiles") is None
    assert launch.LaunchCalibrator(use_profiles=False, profiles_dir=tmp_path / "known" / "profiles") \
        .profile(preset, store) is None


def test_the_confirmation_times_the_two_configurations_in_turn_in_real_pipelines(fixture_pair, tmp_path,
                                                                                 monkeypatch):
    """On the fixture's real baseline pipelines: the profile's baseline and runner-up, each in
    CONFIRM_PAIRS samples, one pair per (round, prompt), nothing else timed."""
    from demo.calibrate.stages import StageRunner
    from demo.engine.native_guard import SafetyRecord

    preset, store = fixture_pair
    monkeypatch.setattr(profile, "CONFIRM_NEW_TOKENS", 8)
    p = planted(tmp_path, of_this_machine(preset, store))
    said = []
    runner = StageRunner(tmp_path / "stages.json", {"test": 1}, SafetyRecord(store.cache_dir), said.append)
    origin = profile.confirm(p, preset, store, said.append, runner)
    assert set(origin.rates) == {"gguf+SDPA", "gguf"}
    assert [len(v) for v in origin.rates.values()] == [profile.CONFIRM_PAIRS] * 2
    assert all(r > 0 for v in origin.rates.values() for r in v)
    assert len(origin.ratios) == profile.CONFIRM_PAIRS and origin.bar == pytest.approx(0.97)
    assert any("every format in turn, 4 rounds" in m for m in said), said


def launch_with(p: dict, preset, store, rates: dict, monkeypatch) -> tuple[Calibration, list, list]:
    """A launch's calibrate on the fixture with profile `p`, this machine's confirmation reading
    `rates` (its timing is the test above), and calibration's full measurement recorded."""
    said, measured = [], []
    monkeypatch.setattr(profile, "confirm", lambda found, *a: profile.verdict(found, rates))

    def measure_whole(preset_, store_, **kw):
        measured.append(kw["main_formats"])
        fp = calibration_store.fingerprint(preset_, store_)
        result = made_up({"fair": ("gguf", "gguf", 2)}, preset=preset_.name, fingerprint=fp)
        path = calibration_store.cache_path(store_, preset_.name, fp)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.to_json())
        return result.model_copy(update={"path": str(path)})

    monkeypatch.setattr(calibration, "calibrate", measure_whole)
    monkeypatch.setattr(calibration, "prepare_candidates", lambda *a, **kw: {})
    calibrator = launch.LaunchCalibrator(profiles_dir=Path(p["dir"]))
    result = calibrator.calibrate(preset, store, said.append, slot=lambda what: threading.Lock())
    return result, said, measured


def test_a_launch_confirms_its_class_profile_and_says_so(fixture_pair, tmp_path, monkeypatch):
    preset, store = fixture_pair
    p = {**planted(tmp_path, of_this_machine(preset, store)), "dir": str(tmp_path / "profiles")}
    result, said, measured = launch_with(p, preset, store, {"gguf+SDPA": [60, 61, 59, 62] * 2,
                                                            "gguf": [50, 52, 51, 50] * 2}, monkeypatch)
    assert measured == [], "a confirmed profile measured the machine whole anyway"
    assert result.origin is not None and result.origin.confirmed and result.origin.profile == p["file"]
    saved = calibration_store.load_cached(store, preset)
    assert saved.origin == result.origin and saved.choice == result.choice
    assert saved.fingerprint.model_dump() == calibration_store.fingerprint(preset, store)
    assert any("from this CPU class's profile" in m for m in said)
    from types import SimpleNamespace

    from demo.engine import startup  # the Ready line says where the choices come from
    assert startup._origin_note(SimpleNamespace(store=store), preset) == \
        " (choices from this CPU class's profile, confirmed here in 8 paired samples)"
    # Its rates were measured on the profile's machine: the page never says "on this machine" of them.
    from demo.engine.calibration_words import calibration_words

    pair = SimpleNamespace(main_format="gguf", draft_format="gguf", baseline=None, baseline_format=None)
    words = calibration_words(result, pair, "fair", 3)["fastest_alone"]
    assert "measured by calibration on another machine of this CPU class (its profile) in fair mode" in words, words


def test_a_launch_this_machine_contradicts_falls_back_to_measuring_and_says_why(fixture_pair, tmp_path,
                                                                                monkeypatch):
    from demo.core.machine import machine_info

    preset, store = fixture_pair
    p = {**planted(tmp_path, of_this_machine(preset, store)), "dir": str(tmp_path / "profiles")}
    rates = {"gguf+SDPA": [45, 47, 62, 47, 45, 47, 46, 47], "gguf": [52, 50, 51, 50] * 2}  # 1.22 in one pair
    result, said, measured = launch_with(p, preset, store, rates, monkeypatch)
    assert measured == [launch.launch_formats(machine_info()["isa_flags"])[0]]
    assert any("but here gguf ran over 1.03× it in 7 of 8 paired samples (median 0.94×): measuring this machine "
               "instead" in m for m in said), said
    assert result.origin is not None and not result.origin.confirmed and result.origin.rates == rates
    assert "contradicted its CPU class's profile" in result.origin.words()
    assert calibration_store.load_cached(store, preset).origin == result.origin  # the evidence is kept


def test_a_launch_on_a_class_without_a_profile_measures_whole(fixture_pair, tmp_path, monkeypatch):
    preset, store = fixture_pair
    other = of_this_machine(preset, store, isa_flags=["avx2"])
    p = {**planted(tmp_path, other), "dir": str(tmp_path / "profiles")}
    result, said, measured = launch_with(p, preset, store, {}, monkeypatch)
    assert len(measured) == 1 and result.origin is None
    lines = launch.LaunchCalibrator().summary_lines(result.model_copy(update={"path": "/c/x.json"}), Path("/c"))
    assert any("python -m demo.calibrate.profile write /c/x.json" in line for line in lines)


def test_each_early_converted_format_is_proved_on_this_cpu_as_it_lands(session_store, smollm2_ir, tmp_path):
    """The warm-up proves a format the early conversion hands over (on_ready) with a race's
    threads in the background as soon as no measuring stage runs: the chosen pair loads at
    Ready without a check first, and no check skews what calibration times."""
    import time
    from types import SimpleNamespace

    from demo.engine import startup
    from demo.engine.arena import Arena, RaceRequest
    from demo.engine.request import threads_for
    from demo.engine.native_guard import NativeConfig

    presets, store = fixture_as_default(tmp_path, session_store)
    preset = presets.get(presets.default)
    arena = Arena(presets, store)
    folder = store.ready_path(preset.main, "gguf")
    request = RaceRequest(prompt="warm-up", preset=preset.name)
    config = NativeConfig(str(folder), "main", threads_for(request))
    assert arena.guard.record.get(config) is None  # this cache has never proved it
    calibrator = SimpleNamespace(convert_early=lambda p, s, report, stop, on_ready: on_ready("main", folder))
    started, check_all = threading.Event(), arena.guard.check_all
    arena.guard.check_all = lambda *a, **k: (started.set(), check_all(*a, **k))
    quiet = threading.Lock()  # a measuring stage holds it: the check waits for the stage to end
    with quiet:
        startup._convert_early(arena, calibrator, preset, print, threading.Event(), request, quiet)
        assert not started.wait(1.0), "a converted format was checked while calibration was timing the machine"
    assert started.wait(10.0), "the check never started once the measuring stage ended"
    deadline = time.time() + 300
    while arena.guard.record.get(config) is None and time.time() < deadline:
        time.sleep(0.5)
    assert arena.guard.record.get(config) is not None, "the converted format was never proved"


def test_with_a_profile_the_main_s_formats_convert_first_and_the_draft_s_last(monkeypatch):
    """The confirmation's format first, then the main's other (the speculative side's, a main's
    whole work again), the draft's last: a quarter of a main's work, it lands during the
    confirmation instead of holding back the main that Ready loads (BENCHMARKS.md, 2026-12-07)."""
    from types import SimpleNamespace

    from demo.models import formats

    calibrator = launch.LaunchCalibrator()
    decisions = {"baseline": {"fair": "int4_channel+SDPA", "race": "int4_channel"}, "runner_up": "int4_channel",
                 "main_formats": ["int4_sym", "int4_channel"], "draft_formats": ["int4_sym"]}
    monkeypatch.setattr(calibrator, "profile", lambda preset, store: {"decisions": decisions})
    monkeypatch.setattr(launch, "has_formats", lambda spec: True)
    monkeypatch.setattr(launch, "CONVERTERS", 1)  # one line, taken in its order
    order = []

    def convert(preset, store, main, draft, report=None, stop=None):
        role, fmt = ("main", main[0]) if main else ("draft", draft[0])
        order.append((role, fmt))
        return {(role, fmt): Path(f"/x/{role}-{fmt}")}

    monkeypatch.setattr(calibration, "prepare_candidates", convert)
    preset = SimpleNamespace(main=SimpleNamespace(format="auto"), draft=SimpleNamespace(format="auto"))
    store = SimpleNamespace(ready_path=lambda spec, fmt: Path("/x") if fmt == formats.DEFAULT_FORMAT else None)
    landed = []
    calibrator.convert_early(preset, store, print, threading.Event(), on_ready=lambda role, folder: landed.append(role))
    assert order == [("main", "int4_channel"), ("main", "int4_sym"), ("draft", "int4_sym")]
    assert landed == ["main", "main", "draft"]
