"""The README's race screenshots are captioned from the race they show (issue 59, item 7):
scripts/race_screenshots.py keeps the race's recording beside the images
(docs/screenshot-race.json) and writes the captions from it; a caption edited by hand, or
images retaken without their recording, fail here."""

import importlib.util
from pathlib import Path

from demo.records.recording import load

ROOT = Path(__file__).resolve().parent.parent


def script():
    spec = importlib.util.spec_from_file_location("race_screenshots", ROOT / "scripts" / "race_screenshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_screenshot_caption_is_the_one_its_recording_gives():
    shots = script()
    rec = load(ROOT / "docs" / shots.RECORDING)
    words = shots.captions(rec)
    for doc in shots.DOCS:
        text = (ROOT / doc).read_text()
        found = {m.group(1).rsplit("/", 1)[-1]: m.group(0) for name in words
                 for m in shots.caption_pattern(name).finditer(text)}
        assert found, f"{doc} shows neither race screenshot"
        for name, line in found.items():
            assert line.startswith(f"![{words[name]}]("), f"{doc}: {line!r} is not the caption {rec.recorded_at}'s race gives"


def test_the_caption_reads_the_recording_s_own_numbers():
    # Independently of the page's metrics: each lane's rate is its step tokens over its seconds.
    shots = script()
    rec = load(ROOT / "docs" / shots.RECORDING)
    rate = {lane.name: sum(len(s.token_ids) for s in lane.steps) / lane.seconds for lane in rec.lanes}
    finished = shots.captions(rec)["screenshot-finished.png"]
    assert f"{rate['speculative'] / rate['baseline']:.2f}× ({rate['speculative']:.1f} vs {rate['baseline']:.1f} tok/s" \
        in finished, finished
    assert f"{rec.mode} mode" in finished and f"main {rec.main_format} + draft" in shots.captions(rec)["screenshot.png"]
