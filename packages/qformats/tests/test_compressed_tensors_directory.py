"""compressed-tensors configs and checkpoint directories: parsing, module targeting, reading, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from qformats.checkpoint import write_safetensors
from qformats.errors import CheckpointFormatError, ConfigError
from qformats.layouts.compressed_tensors.config import parse_compressed_tensors_config
from qformats.layouts.compressed_tensors.directory import open_compressed_tensors
from qformats.layouts.registry import get_layout
from random_weights import random_weight


def ct_config(**weights: object) -> dict[str, object]:
    args = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32}
    args.update(weights)
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": args}},
    }


def test_parse_reads_the_weight_scheme() -> None:
    cfg = parse_compressed_tensors_config(ct_config(symmetric=False, num_bits=3))
    (scheme,) = cfg.schemes
    assert (scheme.bits, scheme.group_size, scheme.sym, scheme.strategy) == (3, 32, False, "group")
    channel = parse_compressed_tensors_config(ct_config(strategy="channel", group_size=None)).schemes[0]
    assert channel.group_size == -1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"type": "float"}, "weights.type"),
        ({"num_bits": 9}, "weights.num_bits"),
        ({"strategy": "block"}, "weights.strategy"),
        ({"group_size": 0}, "weights.group_size"),
        ({"dynamic": True}, "weights.dynamic"),
    ],
)
def test_parse_errors_name_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=f"config_groups.group_0.{field}"):
        parse_compressed_tensors_config(ct_config(**change))


def test_parse_refuses_other_formats_and_methods() -> None:
    raw = ct_config()
    raw["format"] = "naive-quantized"
    with pytest.raises(ConfigError, match="format: qformats reads 'pack-quantized' here, found 'naive-quantized'"):
        parse_compressed_tensors_config(raw)
    with pytest.raises(ConfigError, match="quant_method"):
        parse_compressed_tensors_config({"quant_method": "gptq"})


def test_scheme_targeting_names_and_regexes_before_classes() -> None:
    raw = ct_config()
    raw["config_groups"]["group_1"] = {  # type: ignore[index]
        "targets": ["re:.*down_proj$"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
    }
    raw["ignore"] = ["lm_head", "re:.*layers\\.1\\.self_attn\\.q_proj"]
    cfg = parse_compressed_tensors_config(raw)
    assert cfg.scheme_for("model.layers.0.mlp.down_proj").bits == 8  # type: ignore[union-attr]
    assert cfg.scheme_for("model.layers.0.mlp.up_proj").bits == 4  # type: ignore[union-attr]
    assert cfg.scheme_for("lm_head") is None
    assert cfg.scheme_for("model.layers.1.self_attn.q_proj") is None


def write_ct_checkpoint(root: Path, *, sym: bool, bf16_scales: bool = True) -> dict[str, object]:
    """A two-module pack-quantized directory written by hand from the format's definition."""
    layout = get_layout("pack-quantized")
    rng = np.random.default_rng(11)
    weights = {
        "model.layers.0.mlp.up_proj": random_weight(rng, 64, 32, 4, 32, sym=sym, scale_dtype=np.float32),
        "model.layers.0.mlp.down_proj": random_weight(rng, 32, 64, 4, 32, sym=sym, scale_dtype=np.float32),
    }
    tensors: dict[str, np.ndarray] = {"model.norm.weight": np.ones(32, dtype=np.float32)}
    dtypes: dict[str, str] = {}
    for name, weight in weights.items():
        if bf16_scales:  # bf16-representable values so the BF16 file round-trips exactly
            bits = weight.scales.view(np.uint32) & np.uint32(0xFFFF0000)
            weight = type(weight)(weight.codes, bits.view(np.float32), weight.zeros, weight.g_idx, 4, 32, sym)
            weights[name] = weight
            dtypes[f"{name}.weight_scale"] = "BF16"
        for suffix, arr in layout.pack(weight).items():
            tensors[f"{name}.{suffix}"] = arr
    root.mkdir(parents=True, exist_ok=True)
    write_safetensors(root / "model.safetensors", tensors, {"format": "pt"}, dtypes)
    config = {"model_type": "llama", "quantization_config": ct_config(symmetric=sym)}
    (root / "config.json").write_text(json.dumps(config))
    return weights


@pytest.mark.parametrize("sym", [True, False])
def test_directory_reads_every_module_exactly(tmp_path: Path, sym: bool) -> None:
    expected = write_ct_checkpoint(tmp_path, sym=sym)
    ckpt = open_compressed_tensors(tmp_path)
    assert ckpt.modules() == sorted(expected)
    assert ckpt.dense_names() == ["model.norm.weight"]
    for name, weight in expected.items():
        got = ckpt.logical_weight(name)
        assert got.equals(weight), name
        assert got.scales.dtype == np.float32  # BF16 read as exact float32


def test_directory_errors_name_the_module_and_file(tmp_path: Path) -> None:
    write_ct_checkpoint(tmp_path, sym=True)
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization_config"]["ignore"] = ["re:.*up_proj"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    ckpt = open_compressed_tensors(tmp_path)
    with pytest.raises(CheckpointFormatError, match=r"up_proj' holds packed weights but no config"):
        ckpt.logical_weight("model.layers.0.mlp.up_proj")
    config["quantization_config"]["quant_method"] = "gptq"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointFormatError, match=r"config\.json: quant_method is 'gptq'"):
        open_compressed_tensors(tmp_path)
    config["quantization_config"] = ct_config(num_bits=12)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointFormatError, match="num_bits"):
        open_compressed_tensors(tmp_path)
