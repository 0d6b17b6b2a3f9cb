"""Shared fixtures: a tiny llama saved once per session, and running the real ``lowbit`` entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tiny_model import save_tiny_llama

TIMEOUT_S = 600  # a hang guard for CLI subprocesses; a loaded machine must never reach it


def lowbit_env() -> dict[str, str]:
    """The environment of a CLI subprocess: one torch thread (the tests run beside each other's work)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_lowbit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m lowbit ARGS`` in a subprocess; returns the completed process (text stdout/stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "lowbit", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=lowbit_env(),
        cwd=cwd,
    )


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer llama (hidden 64) with its tokenizer, as a Hugging Face directory."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama", layers=2)


@pytest.fixture(scope="session")
def calibration_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A UTF-8 calibration text file (CPython's bundled docs, first documents)."""
    from pydoc_data.topics import topics

    path = tmp_path_factory.mktemp("calib") / "calibration.txt"
    path.write_text("\n\n".join(topics[k] for k in sorted(topics)[10:30]), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def quantized(tiny_llama: Path, calibration_text: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama quantized by the CLI: GPTQ 4-bit, group 32, act-order, from a calibration file."""
    out = tmp_path_factory.mktemp("quantized") / "gptq"
    plot = out.parent / "loss.png"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--out", str(out), "--group-size", "32", "--desc-act",
        "--calibration", str(calibration_text), "--samples", "8", "--length", "64", "--plot", str(plot),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (out.parent / "stdout.txt").write_text(result.stdout, encoding="utf-8")
    return out


RunLowbit = Callable[..., subprocess.CompletedProcess[str]]
