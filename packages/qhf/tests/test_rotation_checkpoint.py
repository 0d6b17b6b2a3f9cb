"""A quantization run on a rotated model: the checkpoint is a plain model (same layout, rotated dense tensors,
norms at identity, ``meta.rotation`` recorded), reloads unchanged, is deterministic per seed, and a resumed
streaming run writes the uninterrupted bytes (a checkpoint of another rotation is not resumed)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import qhf
import torch
from interrupted_run import interrupt_at_layer
from qcheckpoint import CheckpointConfig
from qhf.corpus import bundled_docs
from qhf.tokenizer import token_blocks
from tiny_models import save_tiny_model

PROBE = torch.tensor([[0, *range(5, 45)]])
GPTQ = {"method": "gptq", "bits": 4, "group_size": 32}


@pytest.fixture(scope="module")
def tied(tmp_path_factory, tokenizer) -> Path:
    """A 4-layer tiny Llama whose output projection is tied to its embedding."""
    directory = tmp_path_factory.mktemp("tied")
    return save_tiny_model(
        directory, "llama", tokenizer=tokenizer, num_hidden_layers=4, tie_word_embeddings=True, norms=0.2
    )


def _rotated(seed: int = 0) -> dict:
    return {**GPTQ, "rotation": {"kind": "hadamard", "seed": seed}}


def _calibration(qm: qhf.QuantModel) -> list[list[int]]:
    return token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=32)


def _quantized(source: Path, config: dict, **kwargs) -> qhf.QuantModel:
    qm = qhf.load(source, config)
    qm.quantize(_calibration(qm), **kwargs)
    return qm


def _weights(directory: Path) -> dict[str, str]:
    """sha256 of every weight shard and of the configs."""
    names = ("config.json", "quantize_config.json")
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.suffix == ".safetensors" or p.name in names
    }


def _saved(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    found: dict[str, torch.Tensor] = {}
    for shard in directory.glob("*.safetensors"):
        found.update(load_file(shard))
    return found


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE, use_cache=False).logits.float()


def test_a_rotated_gptq_checkpoint_is_a_plain_model_that_reloads(tmp_path, tied) -> None:
    from transformers import AutoModelForCausalLM

    qm = _quantized(tied, _rotated())
    summary = qm.summary
    assert summary is not None and summary.rotation is not None and summary.rotation["untied_embeddings"] is True
    in_memory = _logits(qm.model)
    saved = qm.save(tmp_path / "q")
    assert saved.verified and saved.verification["modules_checked"] == 4 * 7
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    assert config["quantization_config"]["meta"]["rotation"] == summary.rotation
    assert config["quantization_config"]["format"] == "gptq"
    report = json.loads((tmp_path / "q" / "quant_report.json").read_text())["summary"]
    assert report["rotation"] == summary.rotation
    tensors = _saved(tmp_path / "q")
    assert "lm_head.weight" in tensors and "model.layers.0.self_attn.q_proj.qweight" in tensors
    norms = (
        "model.norm.weight",
        "model.layers.3.input_layernorm.weight",
        "model.layers.2.post_attention_layernorm.weight",
    )
    for name in norms:
        assert torch.equal(tensors[name], torch.ones(64)), name
    assert torch.equal(tensors["model.embed_tokens.weight"], qm.source.tensor("model.embed_tokens.weight"))
    assert not torch.equal(tensors["lm_head.weight"], tensors["model.embed_tokens.weight"])

    reloaded = _logits(qhf.load_quantized(tmp_path / "q"))
    assert torch.allclose(reloaded, in_memory, atol=1e-4), float((reloaded - in_memory).abs().max())
    original = _logits(AutoModelForCausalLM.from_pretrained(tied, dtype=torch.float32).eval())
    cos = torch.nn.functional.cosine_similarity(original.flatten(), reloaded.flatten(), dim=0)
    assert float(cos) > 0.9  # the quantized rotated model still computes the source's function


def test_the_same_seed_writes_the_same_bytes_and_another_seed_does_not(tmp_path, tied) -> None:
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        _quantized(tied, _rotated(seed)).save(tmp_path / name, verify=False)
    assert _weights(tmp_path / "a") == _weights(tmp_path / "b")
    differing = {k for k, v in _weights(tmp_path / "c").items() if _weights(tmp_path / "a")[k] != v}
    assert "quantize_config.json" in differing and any(k.endswith(".safetensors") for k in differing)


def test_a_resumed_rotated_streaming_run_writes_the_uninterrupted_bytes(tmp_path, tied, monkeypatch) -> None:
    from qcheckpoint.errors import IdentityMismatchError

    _quantized(tied, _rotated()).save(tmp_path / "whole", verify=False)
    checkpoint = CheckpointConfig(path=tmp_path / "ckpt", interval="layer:2")
    first = qhf.load(tied, _rotated())
    interrupt_at_layer(first, _calibration(first), checkpoint, monkeypatch, layer=3)
    other = qhf.load(tied, _rotated(seed=1))
    with pytest.raises(IdentityMismatchError, match="source"):
        other.quantize(_calibration(other), checkpoint=checkpoint, keep_in_memory=False)
    resumed = qhf.load(tied, _rotated())
    summary = resumed.quantize(_calibration(resumed), checkpoint=checkpoint, keep_in_memory=False)
    assert summary.resumed_from == 2
    resumed.save(tmp_path / "resumed")
    assert _weights(tmp_path / "resumed") == _weights(tmp_path / "whole")


def test_without_a_rotation_nothing_is_recorded(tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "bits": 4, "group_size": 32})
    summary = qm.quantize()
    assert summary.rotation is None and qm.rotation_record is None and qm.source.transform is None
    assert "rotation" not in summary.report_dict()
