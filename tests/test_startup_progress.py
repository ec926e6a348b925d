"""The launch's progress (demo.engine.startup_progress): one row per task, and time left only
where it can be predicted. A fake clock; the estimates are checked against arithmetic done
here by hand, never against the module's own numbers."""

import json

from demo.engine.startup_progress import StartupState, task_of
from demo.web.startup_view import startup_html


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_two_models_prepared_side_by_side_keep_a_row_each():
    clock = Clock()
    s = StartupState(clock)
    s.update("preparing", "preparing the default model pair")
    s.task("assembling main model from 22 packages: 10%")
    s.task("rewriting draft model tensors as Q4_0: 50%")
    s.task("assembling main model from 22 packages: 20%")
    rows = s.view().tasks
    assert [(r.label, r.fraction) for r in rows] == [("assembling main model from 22 packages", 0.2),
                                                     ("rewriting draft model tensors as Q4_0", 0.5)]
    s.task("converting main model to OpenVINO IR…")  # the main model's next stage replaces its last
    assert [r.label for r in s.view().tasks] == ["converting main model to OpenVINO IR",
                                                 "rewriting draft model tensors as Q4_0"]
    s.update("preparing", "loading the baseline pipeline (main model)")  # the pair is prepared
    assert s.view().tasks == () and s.view().step.label == "loading the baseline pipeline (main model)"


def test_time_left_from_the_rate_so_far_else_from_an_earlier_launch_else_none(tmp_path):
    clock = Clock()
    s = StartupState(clock)
    s.remember_in(tmp_path / "stages.json", "machine A")
    s.update("preparing", "preparing the default model pair")
    s.task("assembling main model from 22 packages: 0%")
    clock.t += 10
    s.task("assembling main model from 22 packages: 25%")  # 10 s for a quarter: 30 s to go
    assert s.view().tasks[0].seconds_left == 30.0
    s.task("converting main model to OpenVINO IR…")
    assert s.view().tasks[0].seconds_left is None  # never timed on this machine: no number
    clock.t += 20
    s.update("preparing", "loading the baseline pipeline (main model)")
    clock.t += 4
    s.update("preparing", "warming up both pipelines")
    clock.t += 6
    s.update("ready", "Ready.")

    again = StartupState(clock)  # the next launch on this machine
    again.remember_in(tmp_path / "stages.json", "machine A")
    again.update("preparing", "loading the baseline pipeline (main model)")
    clock.t += 1
    assert again.view().step.seconds_left == 3.0  # 4 s last time, 1 s gone
    clock.t += 5
    assert again.view().step.seconds_left is None  # longer than last time: no honest number
    other = StartupState(clock)
    other.remember_in(tmp_path / "stages.json", "machine B")
    other.update("preparing", "loading the baseline pipeline (main model)")
    assert other.view().step.seconds_left is None  # another machine's durations predict nothing here
    recorded = json.loads((tmp_path / "stages.json").read_text())["machine A"]
    # the umbrella step took as long as what was left to prepare: not a duration to predict with
    assert "preparing the default model pair" not in recorded
    assert recorded["converting main model to OpenVINO IR"] == 20.0


def test_a_wait_is_never_predicted_nor_recorded(tmp_path):
    clock = Clock()
    s = StartupState(clock)
    s.remember_in(tmp_path / "stages.json", "m")
    s.update("preparing", "waiting for the run in progress to end, then loading the models")
    clock.t += 30
    assert s.view().step.seconds_left is None
    s.update("preparing", "warming up both pipelines")
    clock.t += 5
    s.update("ready", "Ready.")
    assert json.loads((tmp_path / "stages.json").read_text())["m"] == {"warming up both pipelines": 5.0}


def test_task_of_reads_the_percentage_convention():
    assert task_of("rewriting draft model tensors as Q4_0: 47%") == ("rewriting draft model tensors as Q4_0", 0.47)
    assert task_of("converting main model to OpenVINO IR…") == ("converting main model to OpenVINO IR", None)
    assert task_of("warming up both pipelines") == ("warming up both pipelines", None)


def test_the_startup_line_shows_rows_bars_and_only_predicted_times():
    clock = Clock()
    s = StartupState(clock)
    s.update("preparing", "preparing the default model pair")
    s.task("assembling main model from 22 packages: 0%")
    s.task("converting draft model to OpenVINO IR…")
    clock.t += 10
    s.task("assembling main model from 22 packages: 50%")
    html = startup_html(s.view())
    assert html.count('class="startup-task"') == 2 and 'aria-valuenow="50"' in html
    assert "about 10 s left" in html and "10 s so far" in html  # the draft's stage: no estimate
    s.update("ready", "Ready.")
    assert "Ready" in startup_html(s.view()) and "spinner" not in startup_html(s.view())
