"""Calibration: measure this machine once and choose weight formats and K (python -m demo.calibrate)."""
