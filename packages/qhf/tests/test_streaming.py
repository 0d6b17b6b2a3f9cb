"""Streaming quantization (``quantize(keep_in_memory=False)``): finished layers go to a spill area and back to
meta, ``save`` writes the same bytes as the in-memory run, verify re-reads from disk and still catches a
corrupted tensor, and a resumed streaming run gives the same checkpoint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import qhf
import torch
from interrupted_run import interrupt_at_layer
from qcheckpoint import CheckpointConfig
from qhf.corpus import bundled_docs
from qhf.errors import StateError, VerificationError
from qhf.source import meta_parameters
from qhf.tokenizer import token_blocks
from qlooper.finalize import SpilledWeight
from tiny_models import save_tiny_model

# Files whose bytes are fixed by the run's numbers (the report files also record seconds).
FIXED = ("config.json", "quantize_config.json", "generation_config.json", "tokenizer.json")


@pytest.fixture(scope="module")
def source(tmp_path_factory, tokenizer) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("src"), "llama", tokenizer=tokenizer, num_hidden_layers=4)


def _calibration(qm: qhf.QuantModel) -> list[list[int]]:
    return token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=32)


def _hashes(directory: Path) -> dict[str, str]:
    """sha256 of every weight shard, the index and the configs."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.suffix == ".safetensors" or p.name.endswith(".index.json") or p.name in FIXED
    }


def _quantized(src: Path, config: dict, **kwargs) -> qhf.QuantModel:
    qm = qhf.load(src, config)
    qm.quantize(_calibration(qm), **kwargs)
    return qm


@pytest.mark.parametrize(
    ("config", "shard"),
    [
        ({"method": "gptq", "bits": 4, "group_size": 32}, "40KB"),
        ({"method": "awq", "bits": 4, "group_size": 32}, "4GB"),
        ({"method": "fp8", "weight_block_size": [32, 32]}, "4GB"),
    ],
    ids=["gptq-sharded", "awq", "fp8"],
)
def test_streaming_writes_the_in_memory_bytes(tmp_path, source, config, shard) -> None:
    memory = _quantized(source, config)
    memory.save(tmp_path / "memory", max_shard_size=shard)
    streamed = _quantized(source, config, keep_in_memory=False, spill_dir=tmp_path / "spill")
    spill_root = streamed.spill.root
    assert spill_root.parent == tmp_path / "spill"
    # every decoder layer is back on meta and no finished module holds an array
    layer_params = [n for n, _ in streamed.model.named_parameters() if n.startswith("model.layers.")]
    assert set(layer_params) <= set(meta_parameters(streamed.model))
    assert all(isinstance(done.weight, SpilledWeight) for done in streamed.results.values())
    assert all(done.packed is None and done.bias is None for done in streamed.results.values())
    summary = streamed.save(tmp_path / "streamed", max_shard_size=shard)
    expected = _hashes(tmp_path / "memory")
    shards = len([n for n in expected if n.endswith(".safetensors")])
    assert shards > 1 if shard == "40KB" else shards == 1
    assert _hashes(tmp_path / "streamed") == expected
    verification = summary.verification
    assert verification["passed"] and verification["modules_checked"] == len(streamed.results)
    assert verification["max_logit_diff"] <= 1e-3 and verification["tensors_checked"] > 0
    assert (tmp_path / "streamed" / "quant_log.csv").read_text().count("\n") == len(streamed.results) + 1
    with pytest.raises(StateError, match="keep_in_memory"):
        streamed.perplexity()
    del streamed
    import gc

    gc.collect()
    assert not spill_root.exists()  # the spill area goes with the model


def test_streaming_verify_catches_a_corrupted_module_tensor(tmp_path, source, monkeypatch) -> None:
    import qhf.save.checkpoint as writer

    qm = _quantized(source, {"method": "gptq", "bits": 4, "group_size": 32}, keep_in_memory=False)
    original = writer._module_tensor

    def corrupted(result, key):
        value = original(result, key)
        if result.name == "model.layers.2.mlp.down_proj" and key == "qweight":
            value = value.copy()
            value.flat[0] ^= 0x11
        return value

    monkeypatch.setattr(writer, "_module_tensor", corrupted)
    with pytest.raises(VerificationError, match=r"model\.layers\.2\.mlp\.down_proj: saved dequantized weight differs"):
        qm.save(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_streaming_verify_catches_a_corrupted_spilled_norm(tmp_path, source, monkeypatch) -> None:
    import qhf.save.checkpoint as writer

    qm = _quantized(source, {"method": "gptq", "bits": 4, "group_size": 32}, keep_in_memory=False)
    original = writer._spilled_as

    def corrupted(spill, name, dtype):
        value = original(spill, name, dtype)
        return value + 1 if name == "model.layers.1.post_attention_layernorm.weight" else value

    monkeypatch.setattr(writer, "_spilled_as", corrupted)
    with pytest.raises(VerificationError, match=r"post_attention_layernorm\.weight: saved tensor differs"):
        qm.save(tmp_path / "out")


def test_a_resumed_streaming_run_writes_the_uninterrupted_bytes(tmp_path, source, monkeypatch) -> None:
    config = {"method": "gptq", "bits": 4, "group_size": 32}
    whole = _quantized(source, config)
    whole.save(tmp_path / "whole")
    checkpoint = CheckpointConfig(path=tmp_path / "ckpt", interval="layer:2")
    first = qhf.load(source, config)
    interrupt_at_layer(first, _calibration(first), checkpoint, monkeypatch, layer=3)
    resumed = qhf.load(source, config)
    summary = resumed.quantize(_calibration(resumed), checkpoint=checkpoint, keep_in_memory=False)
    assert summary.resumed_from == 2
    assert all(isinstance(done.weight, SpilledWeight) for done in resumed.results.values())
    resumed.save(tmp_path / "resumed")
    assert _hashes(tmp_path / "resumed") == _hashes(tmp_path / "whole")


def test_keep_in_memory_auto_keeps_a_small_model(source) -> None:
    qm = _quantized(source, {"method": "rtn", "bits": 4, "group_size": 32}, keep_in_memory="auto")
    assert qm.spill is None
    assert np.isfinite(qm.perplexity(max_windows=1).perplexity)
    with pytest.raises(qhf.errors.QHFError, match="keep_in_memory"):
        qhf.load(source, {"method": "rtn"}).quantize(keep_in_memory="sometimes")
    assert torch.get_num_threads() >= 1
