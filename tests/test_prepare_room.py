"""Prepares a visitor causes (issue 21, item 6): inside the admission slot, one heavy thing at
a time, and refused with a sentence when the disk or the memory cannot hold them, before
anything is downloaded, exported or converted. The free-space figures are the probes'
(monkeypatched small); the presets and the store are the real ones, in an empty cache."""

from __future__ import annotations

import threading
import time

import pytest

from demo.core.errors import DemoError
from demo.core.settings import GenerationSettings
from demo.core.streaming import StatusEvent
from demo.engine import arena as arena_module
from demo.engine.arena import Arena, RaceRequest
from demo.models import room
from demo.models.sources import ModelStore
from tests.conftest import SMOLLM2
from tests.test_bad_inputs import assert_one_clear_sentence

HANG_GUARD_S = 60
MB, GB = 1 << 20, 1 << 30


@pytest.fixture
def empty_arena(presets, tmp_path):
    """An arena whose cache holds nothing yet, that lets visitors cause prepares."""
    return Arena(presets, ModelStore(tmp_path / "cache"), allow_downloads=True)


def run_to_end(arena: Arena, preset: str) -> list:
    events = list(arena.run(RaceRequest(prompt="Say hi.", preset=preset, settings=GenerationSettings(max_new_tokens=4))))
    return events


def test_a_prepare_that_does_not_fit_on_the_disk_is_refused_first(empty_arena, monkeypatch):
    probed = []
    monkeypatch.setattr(room, "free_disk_bytes", lambda folder: probed.append(folder) or 10 * MB)
    with pytest.raises(DemoError) as info:
        run_to_end(empty_arena, SMOLLM2)
    message = str(info.value)
    # The fixture's GGUF is 94 MB: it is assembled, then converted to IR beside it.
    assert_one_clear_sentence(message, "Preparing the preset 'smollm2-self-draft' needs about ",
                              " of free disk and only 10 MB is free; choose another preset, or ask the "
                              "operator to free space.")
    assert probed, "the free disk was never looked at"
    assert not (empty_arena.store.cache_dir / "models").exists()  # nothing was started
    assert empty_arena.admission.state() == {"running": None, "waiting": 0}


def test_an_export_that_does_not_fit_in_memory_is_refused_first(empty_arena, monkeypatch):
    monkeypatch.setattr(room, "free_disk_bytes", lambda folder: 10_000 * GB)
    monkeypatch.setattr(room, "free_ram_bytes", lambda: 8 * GB)
    with pytest.raises(DemoError) as info:
        run_to_end(empty_arena, "dolly-v2-7b-3b")
    # 6.9 + 2.8 billion parameters, loaded in f32 by optimum at the same time
    assert_one_clear_sentence(str(info.value), "Preparing the preset 'dolly-v2-7b-3b' needs about 39.5 GB of free "
                              "memory and only 8.0 GB is free; choose another preset, or ask the operator to "
                              "prepare it on a bigger machine.")
    assert not (empty_arena.store.cache_dir / "models").exists()


def test_the_disk_check_counts_the_hub_download_and_the_export(presets, tmp_path):
    store = ModelStore(tmp_path / "cache")
    disk, ram = room.needs(presets.get("dolly-v2-7b-3b"), store)
    assert ram == 4 * (6_857_302_016 + 2_775_208_960)
    # checkpoint (~2 bytes a parameter) into the Hub cache, fp16 IR (2 bytes) into ours
    assert disk[store.cache_dir] == 2 * (6_857_302_016 + 2_775_208_960)
    assert sum(disk.values()) == 4 * (6_857_302_016 + 2_775_208_960)


def test_a_visitors_prepare_waits_for_the_machine_like_a_race(empty_arena, monkeypatch):
    """Nothing is prepared while another job holds the slot; the prepare starts once it is free."""
    prepares = []

    def spy(preset, store, progress, **kwargs):
        prepares.append(preset.name)
        raise DemoError("stand-in: the prepare would start here")

    monkeypatch.setattr(arena_module, "prepare_preset", spy)
    holder = empty_arena.admission.enter("a race")
    events, outcome = [], {}

    def visitor():
        try:
            for event in empty_arena.run(RaceRequest(prompt="Say hi.", preset=SMOLLM2)):
                events.append(event)
        except DemoError as e:
            outcome["error"] = str(e)

    t = threading.Thread(target=visitor)
    t.start()
    deadline = time.monotonic() + HANG_GUARD_S
    while not any(isinstance(e, StatusEvent) and "waiting for the machine" in e.message for e in events):
        assert time.monotonic() < deadline and t.is_alive(), f"never waited for the machine: {events} {outcome}"
        time.sleep(0.02)
    assert prepares == []  # waiting in line: nothing downloads, exports or converts meanwhile
    holder.release()
    t.join(HANG_GUARD_S)
    assert prepares == [SMOLLM2]
    assert outcome["error"] == "stand-in: the prepare would start here"
    assert empty_arena.admission.state() == {"running": None, "waiting": 0}
