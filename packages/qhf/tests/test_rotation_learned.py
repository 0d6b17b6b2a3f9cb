"""A learned residual rotation (kind ``"learned"``): optimized on the calibration rows from the Hadamard start, it
still folds exactly (float64 logits unchanged), lowers its loss, is recorded, gives the same bytes for the same
seed and rows, is part of resume identity, and its setting is checked."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import qhf
import torch
from qcheckpoint import CheckpointConfig
from qhf.errors import RotationError
from qhf.quant_config import QuantConfigError, read_quantize_config
from qhf.rotation import install_rotation, prepare_rotation, resolve_rotation
from qhf.rotation.fold_source import PreparedRotation
from qhf.source import open_source
from test_rotation import AUTO, _logits, float64_norms
from test_rotation_checkpoint import _calibration, _quantized, _weights
from tiny_models import save_tiny_model

GPTQ = {"method": "gptq", "bits": 3, "group_size": 32}


def _learned(steps: int = 20, seed: int = 0, lr: float = 5e-3) -> dict:
    return {**GPTQ, "rotation": {"kind": "learned", "seed": seed, "steps": steps, "lr": lr}}


@pytest.fixture(scope="module")
def outlier(tmp_path_factory, tokenizer) -> Path:
    """A 4-layer tiny Llama (hidden 64) whose embedding has an outlier channel (channel 5 x25), as trained models'
    residual streams do."""
    from safetensors.torch import load_file, save_file

    directory = save_tiny_model(tmp_path_factory.mktemp("outlier"), "llama", tokenizer=tokenizer, num_hidden_layers=4,
                                norms=0.2)  # fmt: skip
    path = directory / "model.safetensors"
    tensors = load_file(path)
    tensors["model.embed_tokens.weight"][:, 5] *= 25.0
    save_file(tensors, path, metadata={"format": "pt"})
    return directory


def test_a_learned_rotation_lowers_its_loss_and_still_folds_exactly(tmp_path, outlier) -> None:
    from transformers import AutoModelForCausalLM

    qm = _quantized(outlier, _learned())
    record = qm.rotation_record
    assert record is not None and record["kind"] == "learned" and record["steps"] == 20 and record["lr"] == 5e-3
    learned = record["learned"]
    assert learned["steps"] == 20 and learned["modules"] == 4 * 7 and learned["rows"] == 4
    assert learned["loss_end"] < learned["loss_start"]  # below the Hadamard start's
    matrix = qm.source.transform.residual  # type: ignore[union-attr]
    eye = torch.eye(64, dtype=torch.float64)
    assert float((matrix @ matrix.T - eye).abs().max()) <= 1e-12
    assert record["matrices"]["residual"]["kind"] == "learned"
    assert record["matrices"]["residual"]["sha256"] == hashlib.sha256(matrix.numpy().tobytes()).hexdigest()
    assert record["matrices"]["head"] == {"size": 16, "kind": "hadamard", "construction": "sylvester 16"}
    hadamard = prepare_rotation(open_source(outlier, torch.float64), resolve_rotation("hadamard"))
    assert not torch.allclose(matrix, hadamard.transform.residual, atol=1e-3)  # type: ignore[union-attr]

    # the learned matrix folded into the float64 source computes the source's logits
    source = open_source(outlier, torch.float64)
    prepared = prepare_rotation(source, AUTO)
    assert prepared.transform is not None
    prepared.transform.residual = matrix
    install_rotation(source, PreparedRotation(prepared.transform, prepared.untie, prepared.record))
    folded = source.materialize_all()
    reference = AutoModelForCausalLM.from_pretrained(outlier, dtype=torch.float64).eval()
    offset = source.definition.norm_weight_offset
    float64_norms(reference, offset)
    float64_norms(folded, offset)
    expected, got = _logits(reference), _logits(folded)
    assert float((got - expected).abs().max()) <= 1e-10 * float(expected.abs().max())

    qm.save(tmp_path / "saved")
    again = read_quantize_config(json.loads((tmp_path / "saved" / "quantize_config.json").read_text()))
    assert again.settings["rotation"] == {
        "kind": "learned", "seed": 0, "residual": True, "heads": True, "steps": 20, "lr": 5e-3,
    }  # fmt: skip


def test_the_same_seed_and_rows_write_the_same_bytes_and_other_steps_do_not(tmp_path, outlier) -> None:
    for name, config in (("a", _learned()), ("b", _learned()), ("c", _learned(steps=10))):
        _quantized(outlier, config).save(tmp_path / name, verify=False)
    assert _weights(tmp_path / "a") == _weights(tmp_path / "b")
    differing = {k for k, v in _weights(tmp_path / "c").items() if _weights(tmp_path / "a")[k] != v}
    assert "quantize_config.json" in differing and any(k.endswith(".safetensors") for k in differing)


def test_a_resumed_learned_run_needs_the_same_learned_settings(tmp_path, outlier, monkeypatch) -> None:
    from qcheckpoint.errors import IdentityMismatchError
    from qlooper.errors import LayerLoadError

    _quantized(outlier, _learned(steps=8)).save(tmp_path / "whole", verify=False)
    checkpoint = CheckpointConfig(path=tmp_path / "ckpt", interval="layer:2")
    first = qhf.load(outlier, _learned(steps=8))
    reads: list[int] = []
    original = first.source.materialize_layer

    def failing(index: int) -> int:  # the Gram pass reads layer 3 first; the layer loop's read fails
        reads.append(index)
        if index == 3 and reads.count(3) == 2:
            raise OSError("disk went away")
        return original(index)

    monkeypatch.setattr(first.source, "materialize_layer", failing)
    with pytest.raises(LayerLoadError):
        first.quantize(_calibration(first), checkpoint=checkpoint, keep_in_memory=False)
    for other_config in (_learned(steps=9), _learned(steps=8, lr=4e-3)):
        other = qhf.load(outlier, other_config)
        with pytest.raises(IdentityMismatchError, match="source"):
            other.quantize(_calibration(other), checkpoint=checkpoint, keep_in_memory=False)
    resumed = qhf.load(outlier, _learned(steps=8))
    summary = resumed.quantize(_calibration(resumed), checkpoint=checkpoint, keep_in_memory=False)
    assert summary.resumed_from == 2
    resumed.save(tmp_path / "resumed")
    assert _weights(tmp_path / "resumed") == _weights(tmp_path / "whole")


def test_the_learned_setting_is_checked_by_name(outlier) -> None:
    assert resolve_rotation("learned") == {
        "kind": "learned", "seed": 0, "residual": "auto", "heads": "auto", "steps": 100, "lr": 1e-3,
    }  # fmt: skip
    cases = [
        ({"kind": "learned", "steps": -1}, r"rotation\.steps: expected a non-negative integer, found -1"),
        ({"kind": "learned", "steps": 2.5}, r"rotation\.steps"),
        ({"kind": "learned", "lr": 0}, r"rotation\.lr: expected a positive"),
        ({"kind": "learned", "lr": float("nan")}, r"rotation\.lr"),
        ({"kind": "learned", "residual": False}, r"rotation\.residual: kind 'learned'"),
        ({"kind": "learned", "step": 3}, r"unknown keys \['step'\] for kind 'learned'"),
        ({"kind": "hadamard", "steps": 3}, r"unknown keys \['steps'\] for kind 'hadamard'"),
    ]
    for value, match in cases:
        with pytest.raises(QuantConfigError, match=match):
            resolve_rotation(value)
    qm = qhf.load(outlier, {"method": "rtn", "bits": 4, "group_size": 32, "rotation": "learned"})
    with pytest.raises(RotationError, match=r"rotation\.kind 'learned': .*calibration rows"):
        qm.quantize()
    assert qm.results is None
