"""The engine: OpenVINO pipelines raced side by side behind one front door, no UI.

Layers above use backend.Backend (the front door's protocol), arena.Arena (and RaceRequest,
StatusEvent, Summary), race's events and three_way; the rest is the engine's own.

  backend.py     Backend: what the page and app.py use of an arena (Arena, serve's RemoteArena)
  arena.py       the front door: presets + prepared models + pipelines + race, and the
                 Calibrator protocol the app's launch calibration implements
  pipelines.py   OpenVINO GenAI pipelines: built, warmed up, kept in the byte-budgeted cache
  openvino_runner.py  one pipeline as a race's runner: template, prompt checks, streaming
  child_side.py  a visitor's side in a child process: a Stop ends a prefill, a crash ends the side
  batching.py    many requests in one continuous-batching pipeline, one thread stepping it
  batched_runner.py  that pipeline as a runner shared by simultaneous runs (a Serve replica)
  race.py        race / fair / one-by-one / replay over any runner (pure logic)
  admission.py   the one admission point: one heavy job at a time, in order
  waiting.py     status streams a cancel still reaches while a job waits in line
  three_way.py   baseline vs draft model vs prompt lookup
  steps.py       the step view: the draft's proposals rebuilt after a greedy race, checked against it
  native_guard.py  what runs on this machine (model × threads): the native-crash record and the smoke test
  stateful.py    one compiled stateful IR driven directly (calibration's timing, the smoke test)
"""
