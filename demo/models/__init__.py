"""Models: presets, weight formats, the model store and its fetchers, the calibration read side."""
