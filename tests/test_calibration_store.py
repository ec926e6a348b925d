"""The calibration a race asks about is read from disk and validated once per content of its file
(issue 60: a race asked the calibration file about two dozen questions, each a parse): a second
race on an unchanged file parses nothing, and a rewritten file is seen at the next question."""

from __future__ import annotations

from demo.models import calibration_store

from .calibrations import made_up, saved


def counting_parses(monkeypatch) -> list:
    parsed: list = []
    real = calibration_store.parse

    def parse(raw: bytes):
        parsed.append(len(raw))
        return real(raw)

    monkeypatch.setattr(calibration_store, "parse", parse)
    return parsed


def test_a_file_is_validated_once_per_content_and_a_rewrite_is_seen_at_once(tmp_path, monkeypatch):
    parsed = counting_parses(monkeypatch)
    path = tmp_path / "made-up.json"
    path.write_text(made_up({"race": ("int8", "gguf", 2)}).to_json())
    assert calibration_store.read(path).choice["race"].k == 2
    assert calibration_store.read(path).choice["race"].k == 2
    assert len(parsed) == 1
    # Rewritten in place within the same clock tick and at the same size: still seen.
    before = path.read_text()
    path.write_text(before.replace('"duration_s": 1.0', '"duration_s": 2.0'))
    assert len(path.read_text()) == len(before)
    assert calibration_store.read(path).duration_s == 2.0 and len(parsed) == 2
    path.write_text(made_up({"race": ("int8", "gguf", 3)}).to_json())
    assert calibration_store.read(path).choice["race"].k == 3 and len(parsed) == 3
    path.write_text("{not json")
    assert calibration_store.read(path) is None
    path.unlink()
    assert calibration_store.read(path) is None


def test_a_race_on_an_unchanged_calibration_parses_it_not_again(session_store, smollm2_ir, tmp_path, monkeypatch):
    from demo.core.settings import GenerationSettings
    from demo.engine.arena import Arena, RaceRequest

    from .test_calibrate import fixture_as_default

    presets, store = fixture_as_default(tmp_path, session_store)
    preset = presets.get("smollm2-self-draft")
    saved(preset, store, {m: ("gguf", "gguf", 3) for m in ("race", "fair")})
    arena = Arena(presets, store)
    request = RaceRequest(prompt="def add(a, b):", settings=GenerationSettings(max_new_tokens=8))
    parsed = counting_parses(monkeypatch)

    def race() -> None:
        assert arena.default_assistant_tokens(None) == 3
        done = [e for e in arena.run(request) if type(e).__name__ == "DoneEvent"]
        assert len(done) == 2 and not any(e.result.error for e in done)
        arena.calibration_for(request)  # the page's "Why this speedup?"

    race()
    assert len(parsed) <= 1, f"the first race parsed the calibration {len(parsed)} times"
    parsed.clear()
    race()
    assert parsed == [], f"a race on an unchanged calibration parsed it {len(parsed)} times"
    saved(preset, store, {m: ("gguf", "gguf", 2) for m in ("race", "fair")})
    assert arena.default_assistant_tokens(None) == 2  # the new calibration, at the next question
    arena.cache.clear()
