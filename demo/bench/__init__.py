"""The benchmark: configurations × prompts × repeats, paired speedups (python -m demo.bench).

  benchmark.py  run_bench, the table, JSON and plot, and the command line (__main__.py runs it)
  curves.py     the acceptance curve by position per sample, pooled per configuration, plotted
"""
