"""``export_mlx``: a GPTQ/AWQ checkpoint directory written as the safetensors + config.json mlx_lm loads.

Checked here against the documented MLX layout (numpy; mlx itself is the ``mlx`` nox session's): every
module's ``weight``/``scales``/``biases`` dequantize to the source's logical weight within the bias rounding
(the bound of test_mlx_layout), dense tensors pass through bit exact, the config names each module's pair.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from checkpoint_fixtures import GPTQ_CONFIG, build, module_tensors
from qformats.checkpoint import SafetensorsFile, write_checkpoint
from qformats.checkpoint.mlx_export import MLXExportError, export_mlx
from qformats.errors import CheckpointFormatError
from qformats.layouts.mlx import unpack_mlx
from random_weights import random_weight
from test_mlx_layout import affine_bound


def _written(root: Path) -> dict[str, np.ndarray]:
    files = sorted(root.glob("model*.safetensors"))
    return {name: f.load(name) for f in map(SafetensorsFile, files) for name in f.tensors}


@pytest.mark.parametrize(("layout", "sym"), [("gemm", False), ("gptq_v2", True), ("gptq", True)])
def test_awq_and_gptq_directories_export_within_the_bias_rounding(tmp_path: Path, layout: str, sym: bool) -> None:
    weights = build(tmp_path / "src", layout, sym=sym)
    report = export_mlx(tmp_path / "src", tmp_path / "mlx", max_shard_size=6000)
    assert len(report.written.files) > 1  # sharded: model-0000i-of-0000N.safetensors, the names mlx_lm globs
    tensors = _written(tmp_path / "mlx")
    config = json.loads((tmp_path / "mlx" / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4, "mode": "affine"}
    assert config["quantization_config"] == config["quantization"] and config["model_type"] == "llama"
    assert not (tmp_path / "mlx" / "quantize_config.json").exists()
    for prefix, weight in weights.items():
        names = {f"{prefix}.{s}" for s in ("weight", "scales", "biases", "bias")}
        assert {n for n in tensors if n.startswith(prefix)} == names
        mlx = unpack_mlx({s: tensors[f"{prefix}.{s}"] for s in ("weight", "scales", "biases")}, bits=4, group_size=32)
        assert np.array_equal(mlx.codes(), weight.codes)
        assert np.all(np.abs(mlx.dequantize() - weight.dequantize()) <= affine_bound(weight, "float16"))
        assert np.array_equal(tensors[f"{prefix}.bias"], np.linspace(-1, 1, 64).astype(np.float16))
    assert np.array_equal(tensors["model.norm.weight"], np.ones(8, np.float32))
    assert report.dense == 4 and set(report.modules) == set(weights) and not report.regrouped


def test_modules_with_other_bits_or_groups_get_their_own_config_entry(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    weights = {
        "model.layers.0.mlp.up_proj": random_weight(rng, 64, 128, 4, 32, sym=True),
        "model.layers.1.mlp.up_proj": random_weight(rng, 64, 128, 4, 32, sym=True),
        "model.layers.2.mlp.up_proj": random_weight(rng, 64, 256, 8, 256, sym=True),
    }
    config = {**GPTQ_CONFIG, "dynamic": {r"+:model\.layers\.2\..*": {"bits": 8, "group_size": 256}}}
    write_checkpoint(tmp_path / "src", module_tensors("gptq", weights), quantize_config=config,
                     model_config={"model_type": "llama"})  # fmt: skip
    report = export_mlx(tmp_path / "src", tmp_path / "mlx")
    quantization = json.loads((tmp_path / "mlx" / "config.json").read_text())["quantization"]
    assert quantization == {
        "group_size": 32, "bits": 4, "mode": "affine",
        "model.layers.2.mlp.up_proj": {"group_size": 128, "bits": 8, "mode": "affine"},
    }  # fmt: skip
    assert report.regrouped == {"model.layers.2.mlp.up_proj": (8, 128, 256)}
    tensors = _written(tmp_path / "mlx")
    prefix = "model.layers.2.mlp.up_proj"
    mlx = unpack_mlx({s: tensors[f"{prefix}.{s}"] for s in ("weight", "scales", "biases")}, bits=8, group_size=128)
    assert mlx.scales.shape == (64, 2)
    assert np.all(np.abs(mlx.dequantize() - weights[prefix].dequantize()) <= affine_bound(weights[prefix], "float16"))


def test_act_order_modules_are_refused_by_name_and_nothing_is_written(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    weights = {
        "model.layers.0.mlp.up_proj": random_weight(rng, 64, 128, 4, 32, sym=True),
        "model.layers.1.mlp.up_proj": random_weight(rng, 64, 128, 4, 32, sym=True, act_order=True),
    }
    config = {**GPTQ_CONFIG, "desc_act": True}
    write_checkpoint(tmp_path / "src", module_tensors("gptq", weights), quantize_config=config,
                     model_config={"model_type": "llama"})  # fmt: skip
    with pytest.raises(MLXExportError, match=r"1 of 2 module\(s\)") as caught:
        export_mlx(tmp_path / "src", tmp_path / "mlx")
    assert [name for name, _ in caught.value.refused] == ["model.layers.1.mlp.up_proj"]
    assert "act-order g_idx (desc_act)" in str(caught.value) and "nothing was written" in str(caught.value)
    assert not (tmp_path / "mlx").exists()


def test_a_directory_without_quantized_modules_is_refused(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "src", {"model.norm.weight": np.ones(8, np.float32)}, quantize_config=GPTQ_CONFIG)
    with pytest.raises(CheckpointFormatError, match="no quantized module"):
        export_mlx(tmp_path / "src", tmp_path / "mlx")
    assert not (tmp_path / "mlx").exists()
