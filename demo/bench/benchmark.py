"""The benchmark's public names in one place, for callers that import the module as a whole
(the page: `from ..bench import benchmark as bench`). Each lives in its own module:

  plan.py     MODES, MODE_ALIASES, METHOD_LABELS, Config, parse_ints, parse_formats
  measure.py  run_bench (the measurement loop, one sample per repeat)
  report.py   aggregate, describe, format_table, write_json
  plot.py     write_plot
  result.py   BenchResult, load_result (the JSON form, typed)
  cli.py      build_parser, main (`python -m demo.bench`)

Patch a name where it is used (e.g. demo.bench.plot._plot_formats), not here.
"""

from ..core.bench_prompts import CLASSES
from .cli import build_parser, main
from .measure import Progress, run_bench
from .plan import METHOD_LABELS, MODE_ALIASES, MODES, Config, parse_formats, parse_ints
from .plot import write_plot
from .report import aggregate, describe, format_table, write_json
from .result import BenchResult, load_result

__all__ = [
    "BenchResult", "CLASSES", "METHOD_LABELS", "MODE_ALIASES", "MODES", "Config", "Progress", "aggregate",
    "build_parser", "describe", "format_table", "load_result", "main", "parse_formats", "parse_ints", "run_bench",
    "write_json", "write_plot",
]
