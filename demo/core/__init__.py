"""Shared ground every layer stands on: plain types and facts, no model is loaded here.

  errors.py         DemoError, the one user-facing error, and run_command for the edges
  settings.py       GenerationSettings, PipelineOptions, the limits and the core split
  machine.py        CPU model, ISA flags, cores, library versions, the machine fingerprint
  memory.py         the memory budget (cgroup or RAM) and resident memory
  streaming.py      Chunk (one main-model step), RunResult, the events a run streams, the sides
  metrics.py        tok/s, TTFT, acceptance, the equality verdict (pure)
  acceptance.py     the acceptance curve by position from step sizes, and where a guess stops paying (pure)
  explain.py        "Why this speedup?" from OpenVINO's timers (pure)
  placement.py      devices: the one scheduler config, each device's properties (pure)
  isolation.py      native work in a child process: a crash or hang becomes one sentence
  quiet_log.py      the terminal log: rate-limited progress, no repeats, durations
  bench_prompts.py  the built-in prompt set (bench, calibration, soak)
"""
