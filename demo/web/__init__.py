"""The web page: the Gradio arena (ui), its HTML/SVG renderers (render) and its booth parts.

  ui.py              the page: the race tab's layout, settings, the startup line; `build_demo(arena)`
  race_tab.py        the race's checks (parse_race_inputs) and its stream into both panels
  bench_tab.py       the Benchmark tab: bench_plan's bounds and the sweep's handler
  load_section.py    the Benchmark tab's throughput under load (demo.bench.load), bounded like the sweep
  render.py          HTML/SVG for the page; every piece of model output is escaped here
  step_view.py       after a race: the acceptance curve by position and the step view
  booth.py           kiosk mode, the scoreboard, recordings, the three-way race, added by ui
  lanes.py, style.py, checks.py, kiosk.py, *_tab.py   the booth's parts
  files.py           the upload cap, and bounded folders for what the page hands out to download

Like every layer above the engine, the page knows the engine's front door
(demo.engine.backend.Backend, which Arena and the cluster's RemoteArena implement;
demo.engine.three_way) and the records (demo.records), never OpenVINO.
Nothing is imported here, so `demo.web.render` loads without Gradio.
"""
