"""Shared fixtures: a tiny llama saved once per session, and running the ``lowbit`` command.

``run_lowbit`` runs the command in this process (``lowbit.cli.main.main``, stdout and stderr captured, a
fresh logging setup per call, as the console script gets): importing torch and transformers again in a fresh
interpreter for every call cost several seconds each on a busy machine and proved nothing more.
``run_lowbit_process`` starts ``python -m lowbit`` for the tests where a separate process is the point (the
entry point itself, a signal sent to a running quantize).
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tiny_model import save_tiny_llama

TIMEOUT_S = 600  # a hang guard for CLI subprocesses; a loaded machine must never reach it


@dataclass(frozen=True)
class Ran:
    """What one ``lowbit`` invocation returned and printed."""

    returncode: int
    stdout: str
    stderr: str


def lowbit_env() -> dict[str, str]:
    """The environment of a CLI subprocess: one torch thread (the tests run beside each other's work)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def one_line_failure(result: Ran, *fragments: str) -> None:
    """``result`` is a usage failure (exit 2) printed as one line, no traceback, holding every fragment."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def run_lowbit(*args: str) -> Ran:
    """``lowbit ARGS`` in this process: exit status (argparse's exits included) and captured stdout/stderr.

    Runs with one torch thread, like the subprocesses (``lowbit_env``): on a busy machine two spinning
    threads per test process made a calibration run several times slower.
    """
    import torch
    from lowbit.cli.main import main

    root = logging.getLogger()
    handlers, level, threads = root.handlers[:], root.level, torch.get_num_threads()
    root.handlers = []  # main() configures logging like a fresh process does
    torch.set_num_threads(1)
    omp = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # main() then keeps torch's count instead of the free-core default
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: usage errors (2) and --help (0)
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
    finally:
        root.handlers, root.level = handlers, level
        torch.set_num_threads(threads)
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp
    return Ran(code, out.getvalue(), err.getvalue())


def run_lowbit_process(*args: str) -> Ran:
    """``python -m lowbit ARGS`` in a fresh interpreter (hang guard ``TIMEOUT_S``)."""
    done = subprocess.run(
        [sys.executable, "-m", "lowbit", *args], capture_output=True, text=True, timeout=TIMEOUT_S, env=lowbit_env()
    )
    return Ran(done.returncode, done.stdout, done.stderr)


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


RunLowbit = Callable[..., Ran]


@pytest.fixture(autouse=True)
def calibration_cache(tmp_path_factory, monkeypatch):
    """Every test's calibration cache lives in a temporary directory, never in the real ~/.cache."""
    root = tmp_path_factory.mktemp("lowbit-cache")
    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(root))
    return root / "calibration"
