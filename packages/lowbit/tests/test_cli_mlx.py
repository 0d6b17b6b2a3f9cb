"""``lowbit convert DIR --to mlx``: a saved tiny llama's GPTQ-layout checkpoint as the directory mlx_lm loads.

Checked against the documented MLX affine layout (``w = scales * q + biases``; mlx itself runs in the
``mlx`` nox session): every module dequantizes to the source checkpoint's weight within the float16
rounding of ``biases = -scales * zeros`` (for the symmetric RTN checkpoint here the zero is a power of two,
so that bias is exact and only float32 rounding remains), dense tensors and the tokenizer carry over.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_lowbit


@pytest.fixture(scope="module")
def natural_order(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny llama quantized by RTN, 4-bit group 32, natural group order (no calibration needed)."""
    out = tmp_path_factory.mktemp("rtn") / "rtn-g32"
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(out), "--method", "rtn", "--group-size", "32",
                        "--quiet")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def test_convert_to_mlx_writes_what_mlx_lm_reads(natural_order: Path, tmp_path: Path) -> None:
    from qformats.checkpoint import SafetensorsFile, open_checkpoint
    from qformats.layouts.mlx import unpack_mlx

    out = tmp_path / "mlx"
    result = run_lowbit("convert", str(natural_order), "--to", "mlx", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "14 transcoded exactly to MLX affine" in result.stdout and "0 regrouped" in result.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4, "mode": "affine"}
    assert "quant_method" not in config["quantization_config"] and config["model_type"] == "llama"
    assert (out / "tokenizer.json").is_file() and (out / "model.safetensors").is_file()
    written = SafetensorsFile(out / "model.safetensors")
    source = open_checkpoint(natural_order)
    for entry in source.modules():
        weight = source.unpack(entry)
        mlx = unpack_mlx({s: written.load(f"{entry.prefix}.{s}") for s in ("weight", "scales", "biases")},
                         bits=4, group_size=32)  # fmt: skip
        assert np.array_equal(mlx.codes(), weight.codes), entry.prefix
        want = weight.dequantize()
        assert np.allclose(mlx.dequantize(), want, rtol=2.0**-22, atol=2.0**-25), entry.prefix
    for name in source.dense_names():
        assert np.array_equal(written.load(name), source.load(name)), name


def test_act_order_checkpoint_is_refused_with_the_rule(quantized: Path, tmp_path: Path) -> None:
    out = tmp_path / "mlx"
    result = run_lowbit("convert", str(quantized), "--to", "mlx", "--out", str(out))
    assert result.returncode == 2
    assert "14 of 14 module(s) cannot be stored as MLX affine weights exactly" in result.stderr
    assert "model.layers.0.self_attn.q_proj: act-order g_idx (desc_act)" in result.stderr
    assert not out.exists()
    lossy = run_lowbit("convert", str(quantized), "--to", "mlx", "--out", str(out), "--allow-lossy")
    assert lossy.returncode == 2 and "--allow-lossy: --to mlx never requantizes" in lossy.stderr
