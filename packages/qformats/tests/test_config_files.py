"""Reading configs from directories (file priority, nested config.json), writing, malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qformats.config import (
    QuantizeConfig,
    embed_in_model_config,
    find_config_file,
    read_config,
    read_config_file,
    write_quantize_config,
)
from qformats.errors import ConfigError


def _write(path: Path, data: object) -> None:
    path.write_text(json.dumps(data), encoding="utf-8")


def test_priority_quantize_config_then_quant_config_then_config_json(tmp_path: Path) -> None:
    _write(tmp_path / "config.json", {"model_type": "llama", "quantization_config": {"bits": 8, "sym": True}})
    assert read_config(tmp_path).bits == 8
    _write(tmp_path / "quant_config.json", {"w_bit": 3, "sym": True})
    assert read_config(tmp_path).bits == 3
    _write(tmp_path / "quantize_config.json", {"bits": 2, "sym": True})
    assert find_config_file(tmp_path).name == "quantize_config.json"
    assert read_config(tmp_path).bits == 2  # a stale preferred file wins over a corrected fallback


def test_missing_and_malformed_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no quantization config found"):
        read_config(tmp_path)
    (tmp_path / "quantize_config.json").write_text('{"bits": 4,', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"quantize_config\.json: invalid JSON at line 1"):
        read_config(tmp_path)
    _write(tmp_path / "config.json", {"model_type": "llama"})
    with pytest.raises(ConfigError, match=r"config\.json: expected a 'quantization_config' object"):
        read_config_file(tmp_path / "config.json")
    _write(tmp_path / "config.json", {"quantization_config": {"bits": 4, "is_marlin_format": True}})
    with pytest.raises(ConfigError, match=r"config\.json:quantization_config: 'is_marlin_format'"):
        read_config_file(tmp_path / "config.json")


def test_write_then_read_and_embed(tmp_path: Path) -> None:
    cfg = QuantizeConfig(bits=3, group_size=64, sym=False, format="gptq_v2", dynamic={"-:lm_head": {}})
    path = write_quantize_config(tmp_path, cfg)
    assert read_config(tmp_path) == cfg
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["quant_method"] == data["method"] == "gptq"
    assert data["checkpoint_format"] == data["format"] == "gptq_v2"
    model = embed_in_model_config({"model_type": "llama"}, cfg)
    assert model["model_type"] == "llama" and model["quantization_config"] == data
    with pytest.raises(ConfigError, match="not a directory"):
        write_quantize_config(tmp_path / "nope", cfg)
