"""Calibration: measure this machine once and choose weight formats and K (python -m demo.calibrate).

  calibration.py  the whole calibration: candidates, stages, the choice
  report.py       the result for people: the terminal summary, a check against a sweep, the plot
  __main__.py     the command line (python -m demo.calibrate)
  measure.py      the measurements: step costs, greedy answers and the draft's guesses, pipeline overhead
  cost_model.py   the standard model with a pipeline's overhead: predictions and the choice (pure)
  stages.py       the measurements, one saved stage at a time, each in a child process
  launch.py       LaunchCalibrator: the calibration a first launch runs (app.py hands it to
                  the engine, which never imports this package)
  doctor.py       which formats and thread counts run on this CPU (python -m demo.doctor)

Results are read back through demo.models.calibration_store.
"""
