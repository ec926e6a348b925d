"""Speculative decoding arena: the same prompt through a baseline and a speculative
OpenVINO GenAI pipeline, side by side.

The engine (presets, sources, pipelines, race, bench) knows nothing of Gradio;
the UI (demo.web.ui) knows nothing of OpenVINO. Nothing heavy is imported here.
"""

__version__ = "0.1.0"
