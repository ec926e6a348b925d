"""The benchmark: configurations × prompts × repeats, paired speedups (python -m demo.bench).

  plan.py       what is measured: modes, methods, Config, the command line's lists (parse_ints)
  measure.py    run_bench: warm-up, every prompt × repeat, one sample per repeat (a BenchResult)
  report.py     aggregates per configuration, class and prompt; the text table; write_json
  plot.py       write_plot: speedup vs K (or formats × K), tok/s per mode, acceptance by position
  curves.py     the acceptance curve by position per sample, pooled per configuration, plotted
  result.py     the JSON form, typed (BenchResult); load_result reads old files too
  cli.py        the command line (__main__.py runs it)
  load.py       throughput under load (--concurrency): N requests in one batching pipeline, the crossover
  load_report.py  its table and plot
  benchmark.py  the public names above in one module, for the page (`bench.run_bench`, …)
"""
