"""``--device``, ``--cache-device`` and ``--compute-dtype`` of ``lowbit quantize`` and ``--device`` of ``lowbit
eval``: checked before any model is read, recorded in the report; the cpu case gives the default checkpoint.

The device parameter is ``cpu`` everywhere; ``cuda`` is added only when ``LOWBIT_REQUIRE_CUDA=1`` (the ``gpu``
nox session), where a machine without CUDA fails instead of skipping."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import run_lowbit

DEVICES = ["cpu", *(["cuda"] if os.environ.get("LOWBIT_REQUIRE_CUDA") == "1" else [])]
QUANTIZE = ["--group-size", "32", "--desc-act", "--samples", "8", "--length", "64", "--quiet"]


def _shards(out: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(out.glob("*.safetensors"))}


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_on_a_device(tiny_llama: Path, quantized: Path, calibration_text: Path, tmp_path: Path,
                              device: str) -> None:  # fmt: skip
    out = tmp_path / "q"
    ran = run_lowbit("quantize", str(tiny_llama), "--out", str(out), "--calibration", str(calibration_text),
                     *QUANTIZE, "--device", device)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    compute = json.loads((out / "quant_report.json").read_text())["summary"]["compute"]
    assert compute["device"].startswith(device) and compute["compute_dtype"] == "float32"
    assert compute["cache_device"] == "cpu"
    if device == "cpu":  # the conftest's run (no --device, no --plot) wrote the same shards
        assert _shards(out) == _shards(quantized)
    evaluated = run_lowbit("eval", str(out), "--device", device, "--window", "32", "--max-windows", "2",
                           "--max-new-tokens", "2", "--json")  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout)
    assert report["device"].startswith(device)
    if device == "cuda":
        assert "triton" in report["backends"], report["backends"]


def test_bfloat16_compute_is_recorded(tiny_llama: Path, calibration_text: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    ran = run_lowbit("quantize", str(tiny_llama), "--out", str(out), "--calibration", str(calibration_text),
                     *QUANTIZE, "--compute-dtype", "bfloat16")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads((out / "quant_report.json").read_text())["summary"]["compute"]["compute_dtype"] == "bfloat16"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--device", "cuda:7"], "--device: 'cuda:7'"),
        (["--device", "foo"], "--device: 'foo' is not a device name (available here: cpu"),
        (["--cache-device", "cuda:7"], "--cache-device: 'cuda:7'"),
        (["--method", "awq", "--compute-dtype", "bfloat16"], "--compute-dtype bfloat16: only plain --method gptq"),
        (
            ["--gptaq", "--compute-dtype", "float16"],
            "--compute-dtype float16: only plain --method gptq runs its layer "
            "forwards in another dtype, found --method gptq --gptaq",
        ),
    ],
)
def test_quantize_refuses_before_reading_the_model(tmp_path: Path, flags: list[str], message: str) -> None:
    source = tmp_path / "not-a-model"  # never opened: the flags are refused first
    source.mkdir()
    ran = run_lowbit("quantize", str(source), "--out", str(tmp_path / "q"), *flags)
    assert ran.returncode == 2 and message in ran.stderr, ran.stderr
    assert "available here: cpu" in ran.stderr or message.startswith("--compute-dtype")
    assert not (tmp_path / "q").exists()


def test_compute_dtype_choices_match_qlooper() -> None:
    from lowbit.cli.parser import COMPUTE_DTYPE_NAMES
    from qlooper.devices import COMPUTE_DTYPES

    assert COMPUTE_DTYPE_NAMES == tuple(COMPUTE_DTYPES)


def test_eval_refuses_a_missing_device(quantized: Path) -> None:
    ran = run_lowbit("eval", str(quantized), "--device", "cuda:7")
    assert ran.returncode == 2 and "--device: 'cuda:7'" in ran.stderr and "available here: cpu" in ran.stderr
