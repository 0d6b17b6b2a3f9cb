"""Shared fixtures: tiny model directories per family (built once per session) and the tiny tokenizer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import build_tokenizer, save_tiny_model

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory, tokenizer):
    """model_type -> directory of a saved tiny model of that family (built lazily, cached)."""
    cache: dict[str, Path] = {}

    def get(model_type: str) -> Path:
        if model_type not in cache:
            cache[model_type] = save_tiny_model(tmp_path_factory.mktemp(model_type), model_type, tokenizer=tokenizer)
        return cache[model_type]

    return get


@pytest.fixture(autouse=True)
def calibration_cache(tmp_path_factory, monkeypatch):
    """Every test's calibration cache lives in a temporary directory, never in the real ~/.cache."""
    root = tmp_path_factory.mktemp("lowbit-cache")
    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(root))
    return root / "calibration"
