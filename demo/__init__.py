"""Speculative decoding arena: the same prompt through a baseline and a speculative
OpenVINO GenAI pipeline, side by side.

The package is in layers; each imports only from its own layer and the ones below it, at
module level and inside functions alike (tests/test_layers.py checks every import):

    core < models < engine < calibrate, records < bench < web < serve < commands

  core/       errors, settings and limits, machine facts, memory, chunks, metrics, "why
              this speedup", device placement, child processes, the benchmark prompts
  models/     presets (models.yaml), weight formats, the model store and its fetchers,
              preparing a pair, the calibration read side (calibration_store)
  engine/     OpenVINO pipelines, the race, admission, the native safety record, the
              three-way race, and the front door everything above uses: arena.Arena
  calibrate/  measuring this machine (python -m demo.calibrate), its stages, the doctor's checks
  records/    the scoreboard, race recordings, what a finished race leaves behind
  bench/      the benchmark (python -m demo.bench)
  web/        the Gradio page and its booth parts
  serve/      the page and the pipelines on a Ray Serve cluster (python -m demo.serve)
  commands    demo/cli.py, prepare.py, record.py, doctor.py and each package's
              __main__.py; app.py sits above them all

Code that only tests and measuring scripts use (the soak, the page's overhead, the
headlines' arithmetic, the EAGLE-3 fixture) lives in lab/, beside this package: lab imports
demo, demo never imports lab.

calibrate and records do not import each other. Where a lower layer has to run something
from a higher one, the higher one passes it in: the engine runs the launch calibration
through the Calibrator that app.py hands to Arena.start_background_warmup.

The engine knows nothing of Gradio; the page knows nothing of OpenVINO. Nothing heavy is
imported by any package's __init__.
"""

__version__ = "0.1.0"
