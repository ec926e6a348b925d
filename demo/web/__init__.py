"""The web page: the Gradio arena (ui), its HTML/SVG renderers (render) and its booth parts.

  ui.py              the page: the race tab, settings, the benchmark tab; `build_demo(arena)`
  render.py          HTML/SVG for the page; every piece of model output is escaped here
  step_view.py       after a race: the acceptance curve by position and the step view
  booth.py           kiosk mode, the scoreboard, recordings, the three-way race, added by ui
  lanes.py, style.py, checks.py, kiosk.py, *_tab.py   the booth's parts
  files.py           the upload cap, and bounded folders for what the page hands out to download

Like every layer above the engine, the page knows the engine's front door
(demo.engine.arena, demo.engine.three_way) and the records (demo.records), never OpenVINO.
Nothing is imported here, so `demo.web.render` loads without Gradio.
"""
