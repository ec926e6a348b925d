"""Records: what finished races leave behind, for the page and the command line.

  scoreboard.py  SQLite record of every finished race
  csv_export.py  the scoreboard as CSV, for a visitor (bounded, no prompts) or the operator
                 (python -m demo.records export-csv), every cell defused against formulas
  recording.py   race recordings: schema, limits, reading untrusted files (demo.record makes them)
  playback.py    a recording played back: its RunResults, its verdict, menu labels, the shipped ones
  outcomes.py    a finished race's scoreboard row and recording
"""
