"""QQQ settings and runs: the reference's defaults and config fields, bad recipes named, modules the QQQ
kernels cannot hold refused by name before any work; a tiny llama quantized with QQQ saves (verified),
reloads with the same logits, is read by qformats as a ``qqq`` checkpoint and exports dense."""

from __future__ import annotations

import json

import pytest
import qhf
import torch
from qformats.checkpoint import Checkpoint
from qformats.layouts.qqq import QQQWeight
from qhf.checkpoint_config import checkpoint_dict
from qhf.config_view import algorithm, setting
from qhf.corpus import bundled_docs
from qhf.errors import QHFError
from qhf.quant_config import QuantConfigError, read_quantize_config
from qhf.tokenizer import token_blocks
from tiny_models import save_tiny_model

PROBE = torch.tensor([[0, *range(5, 45)]])
QQQ_SHAPES = {"hidden_size": 128, "intermediate_size": 256}  # k/v out = 2 heads of 32 = 64


def test_defaults_and_checkpoint_fields() -> None:
    config = read_quantize_config({"method": "qqq"})
    assert (config.format, config.bits, config.group_size) == ("qqq", 4, 128)
    assert (setting(config, "damp_percent"), setting(config, "damp_auto_increment")) == (0.005, 0.001)
    assert setting(config, "act_group_aware") is False
    written = checkpoint_dict(config)
    assert written["method"] == written["quant_method"] == written["format"] == written["checkpoint_format"] == "qqq"
    assert written["wbits"] == 4 and written["sym"] is True and written["desc_act"] is False
    assert written["meta"]["damp_percent"] == 0.005
    again = read_quantize_config(written)
    assert (algorithm(again), setting(again, "damp_percent"), again.group_size) == ("qqq", 0.005, 128)
    lifted = read_quantize_config({"quant_method": "qqq", "wbits": 4, "damp_percent": 0.01})
    assert setting(lifted, "damp_percent") == 0.01


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"bits": 8}, "bits"),
        ({"sym": False}, "sym"),
        ({"desc_act": True}, "desc_act"),
        ({"group_size": 64}, "group_size"),
        ({"act_group_aware": True}, "act_group_aware"),
        ({"format": "gptq"}, "format"),
        ({"gptaq": {}}, "method 'qqq'"),
        ({"adapter": {"rank": 4}}, "method 'qqq'"),
    ],
)
def test_bad_recipes_are_named(config: dict, match: str) -> None:
    with pytest.raises(QuantConfigError, match=match):
        read_quantize_config({"method": "qqq", **config})


def test_module_the_kernels_cannot_hold_is_refused_by_name(tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "qqq", "group_size": -1})  # k/v out = 32
    with pytest.raises(QHFError, match=r"model\.layers\.0\.self_attn\.k_proj \[32 x 64\].*divisible by 64"):
        qm.quantize([[5, 6, 7, 8]])


def test_partial_group_is_refused_by_name(tmp_path) -> None:
    src = save_tiny_model(tmp_path / "src", "llama", hidden_size=192, intermediate_size=256, num_attention_heads=3,
                          num_key_value_heads=1)  # fmt: skip
    qm = qhf.load(src, {"method": "qqq", "group_size": 128})
    with pytest.raises(QHFError, match=r"q_proj \[192 x 192\] at group 128: in_features 192 is not divisible"):
        qm.quantize([[5, 6, 7, 8]])


def test_qqq_quantize_save_reload(tmp_path) -> None:
    src = save_tiny_model(tmp_path / "src", "llama", **QQQ_SHAPES)
    qm = qhf.load(src, {"method": "qqq", "group_size": 128})
    qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=48))
    down = qm.results["model.layers.0.mlp.down_proj"].weight  # in 256: two groups of 128
    q_proj = qm.results["model.layers.0.self_attn.q_proj"].weight  # in 128 = group: stored per channel
    assert isinstance(down, QQQWeight) and down.group_size == 128 and down.s_group is not None
    assert q_proj.group_size == -1 and q_proj.s_group is None
    with torch.no_grad():
        in_memory = qm.model(input_ids=PROBE, use_cache=False).logits.float()
    out = tmp_path / "q"
    saved = qm.save(out)
    assert saved.verified, saved.verification
    config = json.loads((out / "quantize_config.json").read_text())
    assert (config["method"], config["format"], config["wbits"]) == ("qqq", "qqq", 4)
    rows = json.loads((out / "quant_report.json").read_text())["modules"]
    assert len(rows) == 14 and all(r["damp"] == pytest.approx(0.005) and r["samples"] > 0 for r in rows)
    modules = Checkpoint(out).modules()
    assert len(modules) == 14 and {m.layout for m in modules} == {"qqq"}
    loaded = qhf.load_quantized(out)
    with torch.no_grad():
        reloaded = loaded(input_ids=PROBE, use_cache=False).logits.float()
    assert torch.equal(reloaded, in_memory)
    from transformers import AutoModelForCausalLM

    dense_dir = qhf.export.export_dense(out, tmp_path / "dense", dtype=torch.float32)
    with torch.no_grad():
        dense = AutoModelForCausalLM.from_pretrained(dense_dir).eval()(input_ids=PROBE, use_cache=False).logits
    assert torch.allclose(dense, in_memory, atol=1e-5), float((dense - in_memory).abs().max())
