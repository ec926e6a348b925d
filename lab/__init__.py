"""Measuring and fixture-building code that imports the app (`demo`), never the reverse; not
part of what visitors run.

  soak.py           N races in a row in one process (`python -m lab.soak`)
  app_overhead.py   whether the page slows generation down (`python -m lab.app_overhead`)
  paired.py         the headlines' arithmetic: rates at equal token counts, paired ratios
  weights_read.py   bytes a decoding step reads, and the machine's memory bandwidth
  headlines.py      the two headline scripts' common arguments and calibrated arena
  eagle3_fixture.py the SmolLM2 fixture's EAGLE-3 pair (`python -m lab.eagle3_fixture`)
  eagle3_train.py   the small EAGLE-3 head that fixture trains (torch)

demo/ never imports lab (tests/test_layers.py checks it).
"""
