"""A checkpointed ``lowbit quantize`` stopped by SIGTERM resumes to the same checkpoint as an uninterrupted run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TIMEOUT_S, lowbit_env, run_lowbit, run_lowbit_process
from tiny_model import save_tiny_llama

LAYERS = 24


@pytest.fixture(scope="module")
def deep_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough layers that a stop requested after the first commit lands well before the end."""
    return save_tiny_llama(tmp_path_factory.mktemp("deep") / "llama", layers=LAYERS, seed=3)


def _args(source: Path, out: Path, ckpt: Path) -> list[str]:
    return [
        "quantize", str(source), "--out", str(out), "--group-size", "32", "--samples", "16", "--length", "64",
        "--checkpoint-dir", str(ckpt), "--quiet",
    ]  # fmt: skip


def _tensors(directory: Path) -> dict[str, bytes]:
    from safetensors.numpy import load_file

    arrays: dict[str, bytes] = {}
    for shard in sorted(directory.glob("*.safetensors")):
        arrays.update({k: v.tobytes() for k, v in load_file(str(shard)).items()})
    return arrays


def test_sigterm_stops_at_a_boundary_and_the_printed_command_resumes(deep_llama: Path, tmp_path: Path) -> None:
    # Separate processes throughout: a signal to a running quantize, and three runs with one thread each.
    reference = run_lowbit_process(*_args(deep_llama, tmp_path / "ref", tmp_path / "ref-ckpt"))
    assert reference.returncode == 0, reference.stderr

    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lowbit", *_args(deep_llama, out, ckpt)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=lowbit_env(),
    )  # fmt: skip
    deadline = time.monotonic() + TIMEOUT_S
    while not (ckpt / "CURRENT").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)  # after the first commit: the cooperative stop handler is installed
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 130, f"rc {proc.returncode}\n{stdout}\n{stderr}"
    assert "checkpoint committed, resume from step" in stderr
    assert not out.exists() or not any(out.glob("*.safetensors"))
    command = stderr.split("resume with:", 1)[1].strip().splitlines()[0]
    assert command.startswith("lowbit quantize ") and command.endswith(" --resume")

    fresh = run_lowbit(*_args(deep_llama, tmp_path / "other", ckpt))  # without --resume: refused, named
    assert fresh.returncode == 2
    assert f"--checkpoint-dir {ckpt}: it holds an earlier run's checkpoint: add --resume" in fresh.stderr

    import shlex

    resumed = run_lowbit_process(*shlex.split(command)[1:])
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed      from plan step" in resumed.stdout
    assert _tensors(out) == _tensors(tmp_path / "ref")


def test_resume_without_a_checkpoint_says_so(deep_llama: Path, tmp_path: Path) -> None:
    result = run_lowbit(*_args(deep_llama, tmp_path / "out", tmp_path / "empty"), "--resume")
    assert result.returncode == 2
    assert f"--checkpoint-dir {tmp_path / 'empty'}: there is no checkpoint to resume" in result.stderr
    assert not (tmp_path / "out").exists()


def test_weight_only_run_killed_mid_run_resumes_to_identical_files(deep_llama: Path, tmp_path: Path) -> None:
    """A GGUF q4_k_m run (per-module types) SIGKILLed right after its 5th commit resumes to the same bytes."""

    def args(out: Path, ckpt: Path) -> list[str]:
        return ["quantize", str(deep_llama), "--method", "gguf", "--format", "q_k_m", "--out", str(out),
                "--checkpoint-dir", str(ckpt), "--quiet"]  # fmt: skip

    reference = run_lowbit(*args(tmp_path / "ref", tmp_path / "ref-ckpt"))  # in process: only the kill needs one
    assert reference.returncode == 0, reference.stderr
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    killed = subprocess.run(
        [sys.executable, "-m", "lowbit", *args(out, ckpt)],
        capture_output=True, text=True, timeout=TIMEOUT_S,
        env={**lowbit_env(), "QCHECKPOINT_FAULT": "current.after_dirsync#5"},
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, f"rc {killed.returncode}\n{killed.stderr}"
    assert not out.exists() or not any(out.glob("*.safetensors"))

    resumed = run_lowbit(*args(out, ckpt), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed      from plan step" in resumed.stdout
    assert _tensors(out) == _tensors(tmp_path / "ref")
    assert (out / "quantize_config.json").read_bytes() == (tmp_path / "ref" / "quantize_config.json").read_bytes()
