"""ParoQuant settings and checkpoints: the reference's ``krot`` / ``opt_*`` fields read into a ``ParoSpec``
and written back (``zero_point``, ``krot``, ``meta.opt_*``); unsupported variants and shapes refused by name;
a tiny llama quantized with ParoQuant saves (verified), and reloads (and exports dense) with the same logits."""

from __future__ import annotations

import json

import pytest
import qhf
import torch
from qhf.checkpoint_config import checkpoint_dict
from qhf.config_view import algorithm
from qhf.corpus import bundled_docs
from qhf.errors import QHFError
from qhf.paroquant_settings import ParoSettingsError, paro_spec
from qhf.quant_config import read_quantize_config
from qhf.tokenizer import token_blocks

PROBE = torch.tensor([[0, *range(5, 45)]])
BUDGET = {"krot": 4, "opt_rotation_epochs": 2, "opt_finetune_epochs": 1, "opt_train_samples": 128}


def test_fields_parse_and_write_back() -> None:
    config = read_quantize_config({"method": "paroquant", "group_size": 64, **BUDGET, "opt_betas": [0.8, 0.9]})
    spec = paro_spec(config)
    assert (spec.krot, spec.rotation_epochs, spec.train_samples, spec.betas) == (4, 2, 128, (0.8, 0.9))
    assert paro_spec(read_quantize_config({"method": "paroquant"})).krot == 8  # the reference's default
    written = checkpoint_dict(config)
    assert written["format"] == written["checkpoint_format"] == written["method"] == "paroquant"
    assert written["zero_point"] is False and written["krot"] == 4 and "sym" not in written
    meta = written["meta"]
    assert meta["opt_rotation_epochs"] == 2 and meta["opt_pair_ratio"] == 0.5 and meta["opt_optimizer"] == "adamw"
    assert meta["opt_betas"] == [0.8, 0.9] and meta["opt_channel_scale_clamp_max"] == 100.0


def test_a_config_read_again_keeps_its_paroquant_fields() -> None:
    """``qhf.load(src, config)`` re-reads a ``QuantizeConfig``; the opt_* fields ride in it."""
    config = read_quantize_config({"method": "paroquant", "group_size": 64, **BUDGET})
    again = read_quantize_config(config)
    assert paro_spec(again) == paro_spec(config)
    assert checkpoint_dict(again) == checkpoint_dict(config)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"opt_optimizer": "sgd"}, "opt_optimizer"),
        ({"opt_pair_ratio": 0.25}, "opt_pair_ratio"),
        ({"opt_scope": "layer"}, "opt_scope"),
        ({"opt_rotation_epochs": "ten"}, "opt_rotation_epochs"),
        ({"krot": 0}, "krot"),
        ({"sym": False}, "sym"),
        ({"bits": 3}, "bits"),
    ],
)
def test_bad_fields_are_named(config: dict, match: str) -> None:
    with pytest.raises(ParoSettingsError, match=match):
        read_quantize_config({"method": "paroquant", **config})


def test_group_not_dividing_a_module_is_refused_by_name(tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "paroquant", "group_size": 48})
    with pytest.raises(QHFError, match=r"model\.layers\.0\.self_attn\.q_proj.*48"):
        qm.quantize(samples=2, length=16)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE, use_cache=False).logits.float()


def test_paroquant_quantize_save_reload(tmp_path, tiny_dirs) -> None:
    src = tiny_dirs("llama")
    data = token_blocks(qhf.load(src).tokenizer, bundled_docs("calibration").texts, count=4, length=48)
    qm = qhf.load(src, {"method": "paroquant", "bits": 4, "group_size": 32, **BUDGET})
    summary = qm.quantize(data)
    assert summary.method == "paroquant" and summary.modules == 14 and not summary.fallbacks
    out = tmp_path / "paro"
    saved = qm.save(out)
    assert saved.verified and saved.verification["modules_checked"] == 14
    config = json.loads((out / "quantize_config.json").read_text())
    assert config["method"] == "paroquant" and config["krot"] == 4 and config["meta"]["opt_train_samples"] == 128
    lm = qhf.load_quantized(out)
    assert algorithm(lm.config) == "paroquant"
    in_memory = _logits(qm.model)
    assert torch.allclose(_logits(lm), in_memory, atol=1e-4)
    from transformers import AutoModelForCausalLM

    exported = qm.export_dense(tmp_path / "dense", dtype=torch.float32)  # the transform folded into each weight
    dense = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    assert torch.allclose(_logits(dense), in_memory, atol=1e-4)
