"""GPTQ on AWQ-scaled weights through qhf: the ``awq_scales`` setting (top level or under ``meta``), its checkpoint
form (a plain GPTQ checkpoint, the recipe under ``meta``), bad values named; a tiny llama quantized with it saves,
verifies and reloads to the in-memory logits, deterministically, and differs from plain GPTQ."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import qhf
import torch
from qhf.checkpoint_config import checkpoint_dict
from qhf.config_view import awq_scales
from qhf.corpus import bundled_docs
from qhf.quant_config import QuantConfigError, read_quantize_config
from qhf.tokenizer import token_blocks

PROBE = torch.tensor([[0, *range(5, 45)]])
BASE = {"method": "gptq", "bits": 4, "group_size": 32}


def test_setting_parses_from_top_level_and_meta_and_is_written_under_meta() -> None:
    top = read_quantize_config({**BASE, "awq_scales": True})
    assert awq_scales(top)
    assert awq_scales(read_quantize_config({"meta": {"awq_scales": True}}))
    written = checkpoint_dict(top)
    assert written["method"] == written["quant_method"] == "gptq" and written["format"] == "gptq"
    assert written["meta"]["awq_scales"] is True and "awq_scales" not in written
    assert awq_scales(read_quantize_config(written))
    plain = read_quantize_config(BASE)
    assert not awq_scales(plain) and not awq_scales(read_quantize_config({**BASE, "awq_scales": False}))
    assert "awq_scales" not in checkpoint_dict(plain)["meta"]  # off: the config written as before
    assert read_quantize_config({**BASE, "awq_scales": True}).settings["act_group_aware"]  # GPTQ's default order
    awq_layout = read_quantize_config({**BASE, "sym": False, "awq_scales": True, "format": "gemm"})
    written = checkpoint_dict(awq_layout)  # AWQ's layout: an AWQ checkpoint, the recipe under meta
    assert written["quant_method"] == "awq" and written["zero_point"] is True and written["version"] == "gemm"
    assert written["meta"]["algorithm"] == "gptq" and written["meta"]["awq_scales"] is True
    assert checkpoint_dict(read_quantize_config(written)) == written


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"awq_scales": "yes"}, r"awq_scales: expected true or false, found 'yes'"),
        ({"method": "awq", "awq_scales": True}, r"awq_scales: .*method 'awq' cannot use it"),
        ({"method": "rtn", "awq_scales": True}, r"awq_scales: .*method 'rtn' cannot use it"),
        ({"awq_scales": True, "gptaq": {}}, r"awq_scales: not combined with gptaq"),
        ({"awq_scales": True, "adapter": {"rank": 4}}, r"awq_scales: not combined with adapter"),
        ({"awq_scales": True, "sym": False}, r"awq_scales: asymmetric weights in format 'gptq' \(v1 stores zero - 1"),
        ({"awq_scales": True, "format": "gemm", "desc_act": True}, r"awq_scales: desc_act permutes the groups"),
        ({"format": "gemm"}, r"format: method 'gptq' writes one of gptq, gptq_v2, gptq_p, found 'gemm'"),
        ({"awq_scales": True, "format": "qqq"}, r"format: method 'gptq' with awq_scales writes one of gptq, .*gemm"),
    ],
)
def test_bad_values_are_named(config: dict, match: str) -> None:
    with pytest.raises(QuantConfigError, match=match):
        read_quantize_config(config)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE, use_cache=False).logits.float()


def _quantize(src: Path, extra: dict) -> qhf.QuantModel:
    qm = qhf.load(src, {**BASE, **extra})
    qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=48))
    return qm


def _weights_sha(directory: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(directory.glob("*.safetensors")))).hexdigest()


def test_quantize_save_verify_reload(tmp_path, tiny_dirs) -> None:
    src = tiny_dirs("llama")
    qm = _quantize(src, {"awq_scales": True})
    in_memory = _logits(qm.model)
    assert not torch.equal(in_memory, _logits(_quantize(src, {}).model))  # the scales changed the solve
    rows = {row.module: row for row in qm.run.report}
    assert all(row.method == "awq_gptq" for row in rows.values())
    assert "scale_ratio=" in rows["model.layers.0.self_attn.q_proj"].notes
    # grouped-query attention: v_proj's 32 rows cannot take o_proj's 64 scales, so the llama definition gives
    # o_proj no prev_op and AWQ no scales: plain GPTQ there, recorded
    o_proj = rows["model.layers.0.self_attn.o_proj"].notes
    assert "scale_search=skipped: no prev_op" in o_proj
    assert "solver=gptq (unscaled)" in o_proj
    assert "rows_scaled_for=mlp.down_proj" in rows["model.layers.1.mlp.up_proj"].notes
    out = tmp_path / "q"
    saved = qm.save(out)
    assert saved.verified
    config = json.loads((out / "quantize_config.json").read_text())
    assert config["quant_method"] == "gptq" and config["meta"]["awq_scales"] is True
    assert json.loads((out / "config.json").read_text())["quantization_config"]["meta"]["awq_scales"] is True
    summary = json.loads((out / "quant_report.json").read_text())["summary"]
    assert summary["algorithm"] == {"name": "awq_gptq"}
    reloaded = _logits(qhf.load_quantized(out))
    assert torch.allclose(reloaded, in_memory, atol=1e-4), float((reloaded - in_memory).abs().max())
    again = tmp_path / "again"
    _quantize(src, {"awq_scales": True}).save(again)
    assert _weights_sha(again) == _weights_sha(out)  # deterministic, folded norms included


def test_awq_layout_asymmetric_save_verify_reload(tmp_path, tiny_dirs) -> None:
    qm = _quantize(tiny_dirs("llama"), {"sym": False, "awq_scales": True, "format": "gemm"})
    in_memory = _logits(qm.model)
    out = tmp_path / "q"
    assert qm.save(out).verified
    config = json.loads((out / "quantize_config.json").read_text())
    assert config["quant_method"] == "awq" and config["meta"]["awq_scales"] is True
    reloaded = qhf.load_quantized(out)
    assert reloaded.config.format == "gemm"
    logits = _logits(reloaded)
    assert torch.allclose(logits, in_memory, atol=1e-4), float((logits - in_memory).abs().max())
