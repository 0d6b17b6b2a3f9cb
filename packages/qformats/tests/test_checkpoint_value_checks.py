"""Value and naming checks a load or ``inspect`` applies beyond the layouts' shape/dtype rules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from checkpoint_fixtures import GPTQ_CONFIG, module_tensors
from qformats.checkpoint import Checkpoint, write_checkpoint
from qformats.errors import CheckpointFormatError
from qformats.inspect import inspect
from random_weights import random_weight

PREFIX = "model.layers.0.mlp.up_proj"


def _tensors(sym: bool = True, layers: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    weights = {f"model.layers.{i}.mlp.up_proj": random_weight(rng, 64, 128, 4, 32, sym=sym) for i in range(layers)}
    for w in weights.values():
        np.clip(w.zeros, 1, 15, out=w.zeros)  # a range GPTQ v1 stores
    return module_tensors("gptq", weights)


def _write(
    path: Path, tensors: dict[str, np.ndarray], config: dict[str, object] | None = None, layers: int = 2
) -> None:
    write_checkpoint(
        path,
        tensors,
        quantize_config=config or GPTQ_CONFIG,
        model_config={"model_type": "llama", "num_hidden_layers": layers},
        validate=False,
    )


@pytest.mark.parametrize(("value", "found"), [(np.nan, "NaN/Inf"), (np.inf, "NaN/Inf"), (0.0, "zero value")])
def test_bad_scales_are_refused_on_load_and_reported_by_inspect(tmp_path: Path, value: float, found: str) -> None:
    tensors = _tensors()
    tensors[f"{PREFIX}.scales"] = tensors[f"{PREFIX}.scales"].copy()
    tensors[f"{PREFIX}.scales"][1, 3] = value
    _write(tmp_path / "c", tensors)
    ck = Checkpoint(tmp_path / "c")
    with pytest.raises(CheckpointFormatError, match=rf"module '{PREFIX}': \[VALUE-SCALES\] scales: .*{found}"):
        ck.unpack(ck.modules()[0])
    summary = inspect(tmp_path / "c")
    assert summary.violation_count == 1 and "VALUE-SCALES" in summary.modules[0].violations[0]
    ck.unpack(ck.modules()[1])  # the other module is fine


def test_zeros_that_are_not_symmetric_under_a_sym_config_are_refused(tmp_path: Path) -> None:
    _write(tmp_path / "c", _tensors(sym=False))  # asymmetric zeros, labelled sym
    ck = Checkpoint(tmp_path / "c")
    with pytest.raises(CheckpointFormatError, match=r"\[VALUE-SYM-ZEROS\] qzeros: expected every true zero 8"):
        ck.unpack(ck.modules()[0])
    assert inspect(tmp_path / "c").violation_count == 2
    _write(tmp_path / "asym", _tensors(sym=False), dict(GPTQ_CONFIG, sym=False))
    assert inspect(tmp_path / "asym").violation_count == 0


def test_a_config_with_fewer_layers_than_the_tensors_is_reported(tmp_path: Path) -> None:
    _write(tmp_path / "c", _tensors(layers=3), layers=2)
    summary = inspect(tmp_path / "c")
    assert summary.violation_count == 1
    assert "[CONFIG-LAYERS] config.json:num_hidden_layers: expected 3" in summary.other_violations[0]
    _write(tmp_path / "ok", _tensors(layers=3), layers=3)
    assert inspect(tmp_path / "ok").violation_count == 0


def test_a_decoder_layer_list_is_counted_by_decoder_layers(tmp_path: Path) -> None:
    """An encoder-decoder's decoder (``model.decoder.layers.N``) is counted by ``decoder_layers``, not by
    ``num_hidden_layers`` (which BART-style configs may hold for the encoder)."""
    rng = np.random.default_rng(0)
    weights = {f"model.decoder.layers.{i}.fc1": random_weight(rng, 64, 128, 4, 32, sym=True) for i in range(3)}
    for w in weights.values():
        np.clip(w.zeros, 1, 15, out=w.zeros)
    tensors = module_tensors("gptq", weights)
    for name, config in {
        "ok": {"model_type": "bart", "num_hidden_layers": 2, "encoder_layers": 2, "decoder_layers": 3},
        "bad": {"model_type": "bart", "num_hidden_layers": 3, "encoder_layers": 3, "decoder_layers": 2},
    }.items():
        write_checkpoint(tmp_path / name, tensors, quantize_config=GPTQ_CONFIG, model_config=config, validate=False)
    assert inspect(tmp_path / "ok").violation_count == 0
    summary = inspect(tmp_path / "bad")
    assert summary.violation_count == 1
    assert "[CONFIG-LAYERS] config.json:decoder_layers: expected 3" in summary.other_violations[0]


def test_unknown_tensors_inside_a_quantized_module_are_listed_as_warnings(tmp_path: Path) -> None:
    tensors = _tensors()
    tensors[f"{PREFIX}.weight"] = np.ones((64, 128), np.float16)
    _write(tmp_path / "c", tensors)
    summary = inspect(tmp_path / "c")
    assert any("1 unknown tensor(s)" in w and f"{PREFIX}.weight" in w for w in summary.warnings)


def test_packed_tensors_under_a_negative_dynamic_rule_are_violations_in_inspect(tmp_path: Path) -> None:
    config = dict(GPTQ_CONFIG, dynamic={r"-:model\.layers\.1\.": {}})
    _write(tmp_path / "c", _tensors(), config)
    summary = inspect(tmp_path / "c")
    assert summary.violation_count == 1 and "CONFIG-EXCLUDED" in summary.other_violations[0]
    with pytest.raises(CheckpointFormatError, match="CONFIG-EXCLUDED"):
        Checkpoint(tmp_path / "c").dense_names()
    assert json.loads(json.dumps(summary.to_dict()))["violation_count"] == 1
