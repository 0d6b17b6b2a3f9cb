"""Interop suite set-up: CPU-only GPT-QModel, no torch.compile, shared tiny sources.

``TORCHDYNAMO_DISABLE`` must be set before torch is imported: GPT-QModel's TorchLinear wraps its
dequantization in ``torch.compile``, which costs about a minute per module shape on a small CPU and
changes nothing in the numbers compared here.
"""

from __future__ import annotations

import os

os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
os.environ.setdefault("BUILD_CUDA_EXT", "0")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

from pathlib import Path

import pytest
from tiny_llama import save_tiny_llama


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The float32 tiny Llama every case quantizes."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def positive_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with 16 strictly positive rows in layer 0's up_proj (true zero 0 when asymmetric)."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-positive"), positive_rows=16)
