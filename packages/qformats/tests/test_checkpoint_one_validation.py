"""One validation path: what ``inspect`` reports, ``Checkpoint.require_valid`` (every loader) refuses by name.

Also the dense side (issue 36): a dense tensor's crc32 is verified when ``inspect`` validates, NaN/Inf and
all-zero dense matrices are ``VALUE-DENSE``, a module's ``scales``/``qzeros`` left without their
``qweight`` are ``LAYOUT-ORPHAN``, and a tensor no model module holds is named in a warning.
"""

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

EMBED = "model.embed_tokens.weight"


def _tensors(layers: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    weights = {f"model.layers.{i}.mlp.up_proj": random_weight(rng, 64, 128, 4, 32, sym=True) for i in range(layers)}
    tensors = module_tensors("gptq", weights)
    tensors[EMBED] = rng.standard_normal((32, 128)).astype(np.float16)
    tensors["model.norm.weight"] = np.ones(128, dtype=np.float16)
    return tensors


def _write(path: Path, tensors: dict[str, np.ndarray], layers: int = 2) -> Path:
    write_checkpoint(
        path,
        tensors,
        quantize_config=GPTQ_CONFIG,
        model_config={"model_type": "llama", "num_hidden_layers": layers},
        validate=False,
    )
    return path


def _refused(path: Path, rule: str, where: str) -> None:
    """inspect reports ``rule`` at ``where``, and require_valid refuses naming both."""
    summary = inspect(path)
    texts = summary.other_violations + [v for m in summary.modules for v in m.violations]
    assert any(rule in t and where in t for t in texts), texts
    with pytest.raises(CheckpointFormatError, match=rf"violation\(s\), refused: .*\[{rule}\] .*{where}"):
        Checkpoint(path).require_valid()


def test_a_clean_checkpoint_passes_require_valid(tmp_path: Path) -> None:
    path = _write(tmp_path / "c", _tensors())
    Checkpoint(path).require_valid()
    assert inspect(path).violation_count == 0


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_non_finite_dense_weight_is_refused(tmp_path: Path, value: float) -> None:
    tensors = _tensors()
    tensors[EMBED][3, 5] = value
    _refused(_write(tmp_path / "c", tensors), "VALUE-DENSE", EMBED)


def test_every_tensor_zero_is_refused(tmp_path: Path) -> None:
    tensors = {name: np.zeros_like(value) for name, value in _tensors().items()}
    path = _write(tmp_path / "c", tensors)
    _refused(path, "VALUE-DENSE", EMBED)
    _refused(path, "VALUE-SCALES", "scales")


def test_zero_router_statics_and_row_vectors_are_not_weights(tmp_path: Path) -> None:
    """A MoE router's ``e_score_correction_bias`` starts at zero (ernie4_5_moe stores it ``[1, experts]``); only
    an all-zero ``weight`` matrix is refused."""
    tensors = _tensors()
    tensors["model.layers.0.mlp.gate.moe_statics.e_score_correction_bias"] = np.zeros((1, 4), dtype=np.float32)
    tensors["model.layers.0.mlp.gate.moe_statics.zeros_table"] = np.zeros((4, 4), dtype=np.float32)
    tensors["model.layers.0.mlp.router.weight"] = np.zeros((1, 128), dtype=np.float16)
    Checkpoint(_write(tmp_path / "c", tensors)).require_valid()


@pytest.mark.parametrize(("layers", "declared"), [(1, 2), (3, 2)])
def test_a_dropped_or_extra_layer_is_refused(tmp_path: Path, layers: int, declared: int) -> None:
    _refused(_write(tmp_path / "c", _tensors(layers), layers=declared), "CONFIG-LAYERS", "num_hidden_layers")


def test_zeros_breaking_sym_are_refused(tmp_path: Path) -> None:
    tensors = _tensors()
    config = dict(GPTQ_CONFIG)
    rng = np.random.default_rng(1)
    weight = random_weight(rng, 64, 128, 4, 32, sym=False)
    np.clip(weight.zeros, 1, 15, out=weight.zeros)
    tensors.update(module_tensors("gptq", {"model.layers.0.mlp.up_proj": weight}))
    model_config = {"model_type": "llama"}
    write_checkpoint(tmp_path / "c", tensors, quantize_config=config, model_config=model_config, validate=False)
    _refused(tmp_path / "c", "VALUE-SYM-ZEROS", "qzeros")


def test_a_flipped_byte_in_a_dense_tensor_is_refused_by_inspect(tmp_path: Path) -> None:
    path = _write(tmp_path / "c", _tensors())
    ck = Checkpoint(path)
    shard = ck.files[ck.weight_map[EMBED]]
    offset = shard.tensors[EMBED].start + 17
    data = bytearray(shard.path.read_bytes())
    data[offset] ^= 0x40
    shard.path.write_bytes(bytes(data))
    with pytest.raises(CheckpointFormatError, match=rf"tensor '{EMBED}': dtype, shape or bytes do not match the crc32"):
        inspect(path)


def test_scales_of_a_deleted_qweight_are_orphans(tmp_path: Path) -> None:
    tensors = _tensors()
    del tensors["model.layers.1.mlp.up_proj.qweight"]
    path = _write(tmp_path / "c", tensors)
    summary = inspect(path)
    assert len(summary.modules) == 1
    _refused(path, "LAYOUT-ORPHAN", "model.layers.1.mlp.up_proj.scales")


def test_a_tensor_nothing_expects_is_named_in_a_warning(tmp_path: Path) -> None:
    tensors = _tensors()
    tensors["model.layers.0.mlp.payload"] = np.ones((4, 4), dtype=np.float16)
    summary = inspect(_write(tmp_path / "c", tensors))
    assert any("model.layers.0.mlp.payload" in w and "no model module" in w for w in summary.warnings), summary.warnings
    assert json.dumps(summary.to_dict())  # the summary stays serializable
