"""``lowbit quantize --method fp8|nf4|gguf`` end to end: quantize, save, verify, inspect, reload, eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import run_lowbit
from safetensors.torch import load_file  # FP8 weights are F8_E4M3, which numpy has no dtype for


def _perplexity(stdout: str) -> float:
    line = next(line for line in stdout.splitlines() if line.startswith("perplexity"))
    return float(line.split()[1])


@pytest.fixture(scope="module")
def dense_ppl(tiny_llama: Path) -> float:
    result = run_lowbit("eval", str(tiny_llama), "--window", "32", "--max-windows", "4", "--max-new-tokens", "0")
    assert result.returncode == 0, result.stderr
    return _perplexity(result.stdout)


@pytest.mark.parametrize(
    ("flags", "fields", "marker", "types", "bound"),
    [
        (["--method", "fp8"], {"method": "fp8", "format": "float8_e4m3fn", "weight_scale_method": "row"},
         "weight_scale_inv", {"float8_e4m3fn row": 14}, 0.02),
        (["--method", "nf4"], {"method": "bitsandbytes", "format": "nf4", "bits": 4}, "weight_quant_map",
         {"nf4 block 64": 14}, 0.10),
        # q4_k_m on 2 layers: v_proj and down_proj of the last layer get Q6_K (llama.cpp's rule)
        (["--method", "gguf", "--format", "q_k_m"], {"method": "gguf", "format": "q_k_m", "bits": 4}, "qweight",
         {"Q4_K": 12, "Q6_K": 2}, 0.10),
    ],
)  # fmt: skip
def test_weight_only_run_saves_reloads_and_evaluates(
    flags: list[str],
    fields: dict,
    marker: str,
    types: dict,
    bound: float,
    tiny_llama: Path,
    dense_ppl: float,
    tmp_path: Path,
) -> None:
    out = tmp_path / "q"
    result = run_lowbit("quantize", str(tiny_llama), *flags, "--out", str(out), "--quiet")
    assert result.returncode == 0, result.stderr
    assert "(weight-only)" in result.stdout and "verified     passed" in result.stdout
    assert "engines      loaded by" in result.stdout and "not assessed" not in result.stdout
    inspected = run_lowbit("inspect", str(out), "--json")
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    assert {k: n for k, (n, _) in report["types"].items()} == types and report["violation_count"] == 0
    assert len(report["modules"]) == 14 and len(report["engines"]) == 12
    assert not [line for line in result.stdout.splitlines() if line.startswith("calibration")]
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert {k: config[k] for k in fields} == fields
    tensors = load_file(str(out / "model.safetensors"))
    assert sum(name.endswith(f".{marker}") for name in tensors) == 14
    assert not any(name.endswith("proj.weight") and tensors[name].dtype == torch.float32 for name in tensors)

    evaluated = run_lowbit("eval", str(out), "--window", "32", "--max-windows", "4", "--max-new-tokens", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "(quantized; backends:" in evaluated.stdout
    ppl = _perplexity(evaluated.stdout)
    assert abs(ppl - dense_ppl) / dense_ppl < bound, f"perplexity {ppl} vs dense {dense_ppl}"


def test_fp8_block_scaling_and_inspect(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "block"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--method", "fp8", "--fp8-block", "32,32", "--out", str(out), "--quiet"
    )
    assert result.returncode == 0, result.stderr
    config = json.loads((out / "quantize_config.json").read_text())
    assert (config["weight_scale_method"], config["weight_block_size"]) == ("block", [32, 32])
    scale = load_file(str(out / "model.safetensors"))["model.layers.0.mlp.down_proj.weight_scale_inv"]
    assert scale.shape == (2, 4)  # [64 / 32, 128 / 32]
    inspected = run_lowbit("inspect", str(out), "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["engines"]
