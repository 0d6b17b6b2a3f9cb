"""``lowbit quantize`` through the command's main() on a tiny llama: report, checkpoint, methods, plot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from conftest import run_lowbit

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_gptq_run_reports_and_saves_a_checkpoint_close_to_the_source(quantized: Path, tiny_llama: Path) -> None:
    stdout = (quantized.parent / "stdout.txt").read_text(encoding="utf-8")
    table = stdout.split("layer  modules", 1)[1]
    assert [line.split()[:2] for line in table.splitlines()[2:4]] == [["0", "7"], ["1", "7"]]
    assert "calibration.txt (8 blocks of 64 tokens)" in stdout
    assert "size before" in stdout and "size after" in stdout and "verified     passed" in stdout
    assert f"result       {quantized.resolve()}" in stdout
    config = json.loads((quantized / "quantize_config.json").read_text())
    assert (config["method"], config["format"], config["bits"], config["group_size"]) == ("gptq", "gptq", 4, 32)
    assert config["desc_act"] is True
    assert (quantized.parent / "loss.png").read_bytes()[:8] == PNG_MAGIC

    from qformats.checkpoint import open_checkpoint
    from safetensors.numpy import load_file

    dense = load_file(str(tiny_llama / "model.safetensors"))
    checkpoint = open_checkpoint(quantized)
    entries = checkpoint.modules()
    assert len(entries) == 14
    for entry in entries:
        weight = checkpoint.unpack(entry).dequantize()
        original = dense[f"{entry.prefix}.weight"]
        relative = np.linalg.norm(weight - original) / np.linalg.norm(original)
        assert relative < 0.2, f"{entry.prefix}: relative error {relative:.3f}"


def test_awq_with_the_builtin_calibration_says_which_source_it_used(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "awq"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--method", "awq", "--group-size", "32", "--samples", "4", "--length", "32",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "no calibration given: using qhf's default calibration source" in result.stdout
    config = json.loads((out / "quantize_config.json").read_text())
    assert (config["method"], config["format"]) == ("awq", "gemm")


def test_rtn_skips_calibration_and_writes_the_requested_layout(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "rtn"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--method", "rtn", "--format", "gptq_v2", "--group-size", "32", "--asym",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not [line for line in result.stdout.splitlines() if line.startswith("calibration")]
    config = json.loads((out / "quantize_config.json").read_text())
    assert (config["format"], config["sym"]) == ("gptq_v2", False)
    assert "fallbacks    0" in result.stdout


def test_best_preset_runs_end_to_end_and_records_its_settings(
    tiny_llama: Path, calibration_text: Path, tmp_path: Path
) -> None:
    out = tmp_path / "best"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--preset", "best", "--group-size", "32", "--calibration", str(calibration_text),
        "--samples", "4", "--length", "32", "--out", str(out), "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    config = json.loads((out / "quantize_config.json").read_text())
    assert config["desc_act"] is True
    meta = config["meta"]
    assert (meta["mse"], meta["damp_percent"], meta["act_group_aware"]) == (2.0, 0.05, False)
    assert meta["rotation"]["kind"] == "hadamard"
