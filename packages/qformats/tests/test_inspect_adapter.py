"""inspect() reports the LoRA (EoRA) adapter a checkpoint's config names, and each way it is broken."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from checkpoint_fixtures import GPTQ_CONFIG, build
from qformats.checkpoint.safetensors_io import write_safetensors
from qformats.inspect import format_text, inspect

MODULES = ("model.layers.0.mlp.up_proj", "model.layers.0.self_attn.q_proj")


def _with_adapter(root: Path, rank: int = 4, peft_rank: int | None = None, drop: str | None = None) -> Path:
    """A GPTQ checkpoint whose config names ``eora/`` with rank ``rank``, and that adapter on disk."""
    build(root, layout="gptq", sym=True)
    config = dict(GPTQ_CONFIG, adapter={"name": "lora", "path": "eora", "rank": rank})
    (root / "quantize_config.json").write_text(json.dumps(config))
    tensors = {}
    for module in MODULES:
        tensors[f"base_model.model.{module}.lora_A.weight"] = np.zeros((rank, 128), np.float16)
        tensors[f"base_model.model.{module}.lora_B.weight"] = np.zeros((64, rank), np.float16)
    if drop is not None:
        del tensors[drop]
    (root / "eora").mkdir()
    write_safetensors(root / "eora" / "adapter_model.safetensors", tensors, {"format": "pt"})
    peft = {"peft_type": "LORA", "r": peft_rank or rank, "lora_alpha": rank, "target_modules": ["q_proj", "up_proj"]}
    (root / "eora" / "adapter_config.json").write_text(json.dumps(peft))
    return root


def test_a_checkpoint_without_an_adapter_reports_none(tmp_path: Path) -> None:
    build(tmp_path / "ck", layout="gptq", sym=True)
    s = inspect(tmp_path / "ck")
    assert s.adapter is None and "adapter " not in format_text(s)


def test_the_adapter_is_summarized(tmp_path: Path) -> None:
    s = inspect(_with_adapter(tmp_path / "ck"))
    assert s.violation_count == 0
    assert s.adapter == {
        "name": "lora",
        "path": "eora",
        "rank": 4,
        "target_modules": ["q_proj", "up_proj"],
        "modules": 2,
        "bytes": 2 * (4 * 128 + 64 * 4) * 2,
    }
    assert "adapter      lora rank 4 in eora/: 2 modules" in format_text(s)
    assert s.to_dict()["adapter"]["modules"] == 2


def test_a_missing_adapter_directory_is_a_violation(tmp_path: Path) -> None:
    root = _with_adapter(tmp_path / "ck")
    (root / "eora" / "adapter_model.safetensors").unlink()
    s = inspect(root)
    assert s.violation_count == 1
    assert "eora/adapter_model.safetensors: unreadable" in s.other_violations[0]


def test_a_rank_other_than_the_config_s_is_a_violation(tmp_path: Path) -> None:
    s = inspect(_with_adapter(tmp_path / "ck", rank=4, peft_rank=8))
    assert s.violation_count == 1 and "'r' is 8, the quantization config's rank is 4" in s.other_violations[0]


def test_a_module_with_one_factor_is_a_violation(tmp_path: Path) -> None:
    dropped = f"base_model.model.{MODULES[1]}.lora_B.weight"
    s = inspect(_with_adapter(tmp_path / "ck", drop=dropped))
    assert s.violation_count == 1 and f"{MODULES[1]}.lora_B.weight is missing" in s.other_violations[0]
    assert s.adapter is not None and s.adapter["modules"] == 1


def test_a_factor_of_another_rank_is_a_violation(tmp_path: Path) -> None:
    root = _with_adapter(tmp_path / "ck", rank=4)
    config = json.loads((root / "quantize_config.json").read_text())
    config["adapter"]["rank"] = 8
    (root / "quantize_config.json").write_text(json.dumps(config))
    (root / "eora" / "adapter_config.json").write_text(json.dumps({"r": 8, "target_modules": []}))
    s = inspect(root)
    assert s.violation_count == 2  # both modules' factors are rank 4
    expected = "expected lora_A [8, in] and lora_B [out, 8], found [4, 128] and [64, 4]"
    assert all(expected in v for v in s.other_violations)


def test_an_adapter_path_outside_the_checkpoint_is_refused(tmp_path: Path) -> None:
    root = _with_adapter(tmp_path / "ck")
    config = json.loads((root / "quantize_config.json").read_text())
    config["adapter"]["path"] = "../elsewhere"
    (root / "quantize_config.json").write_text(json.dumps(config))
    s = inspect(root)
    assert s.violation_count == 1 and "../elsewhere/adapter_model.safetensors: unreadable" in s.other_violations[0]
