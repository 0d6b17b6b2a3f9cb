"""QQQ and VPTQ checkpoint directories whose module tensors come from GPT-QModel 7.7.0's own pack code and
whose config is the reference's own ``QQQConfig`` / ``VPTQConfig.to_dict()``: lowbit's directory reader finds
every module, reports no violation, and dequantizes each to the reference's dense weight exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from peer_qqq import pack_with_reference, reference_dense, reference_qqq_inputs
from peer_vptq import module_tensors, reference_vptq_module
from peer_vptq import reference_dense as vptq_reference_dense
from qformats.checkpoint import Checkpoint, transcode_checkpoint, write_checkpoint
from qformats.errors import TranscodeError
from qformats.inspect import inspect

VPTQ_FIELDS = {
    "vector_lens": [4, 8], "num_centroids": [32, 128], "num_res_centroids": [-1, 8], "npercent": 5,
    "group_num": 3, "enable_norm": True, "norm_dim": 0, "enable_perm": True,
}  # fmt: skip


def reference_config(name: str, **fields: Any) -> dict[str, Any]:
    """The reference config class's ``to_dict()`` (``meta`` left out: it names a temporary directory)."""
    from gptqmodel.quantization import config

    cfg = getattr(config, name)(**fields).to_dict()
    cfg.pop("meta", None)
    return {k: getattr(v, "value", v) for k, v in cfg.items()}


def test_qqq_directory_packed_by_the_reference(tmp_path: Path) -> None:
    tensors: dict[str, np.ndarray] = {}
    dense: dict[str, np.ndarray] = {}
    for i, (k, n) in enumerate([(256, 128), (512, 192)]):
        prefix = f"model.layers.{i}.mlp.down_proj"
        packed = pack_with_reference(*reference_qqq_inputs(k, n, 128, seed=i), 128)
        tensors.update({f"{prefix}.{name}": value for name, value in packed.items()})
        dense[prefix] = reference_dense(packed, k, n, 128)
    config = reference_config("QQQConfig", bits=4, group_size=128)
    write_checkpoint(tmp_path / "qqq", tensors, quantize_config=config, model_config={"model_type": "llama"})
    summary = inspect(tmp_path / "qqq")
    assert summary.violation_count == 0 and [m.layout for m in summary.modules] == ["qqq", "qqq"]
    checkpoint = Checkpoint(tmp_path / "qqq")
    for entry in checkpoint.modules():
        assert np.array_equal(checkpoint.dense(entry), dense[entry.prefix]), entry.prefix
    # Grouped: s_channel * (int8 step) is not one float32 scale per group for every weight; refused by name.
    with pytest.raises(TranscodeError, match=r"model\.layers\.0\.mlp\.down_proj.*weights differ"):
        transcode_checkpoint(tmp_path / "qqq", tmp_path / "gptq", to="gptq")


def test_vptq_directory_packed_by_the_reference(tmp_path: Path) -> None:
    tensors: dict[str, np.ndarray] = {}
    dense: dict[str, np.ndarray] = {}
    for i, (k, n) in enumerate([(128, 64), (96, 40)]):
        prefix = f"model.layers.{i}.self_attn.o_proj"
        module = reference_vptq_module(k, n, dict(VPTQ_FIELDS), torch.float16, seed=i)
        tensors.update({f"{prefix}.{name}": value for name, value in module_tensors(module).items()})
        dense[prefix] = vptq_reference_dense(module)
    config = reference_config("VPTQConfig", **VPTQ_FIELDS)
    write_checkpoint(tmp_path / "vptq", tensors, quantize_config=config, model_config={"model_type": "llama"})
    summary = inspect(tmp_path / "vptq")
    assert summary.violation_count == 0 and not summary.warnings
    assert [(m.in_features, m.out_features) for m in summary.modules] == [(128, 64), (96, 40)]
    checkpoint = Checkpoint(tmp_path / "vptq")
    for entry in checkpoint.modules():
        assert np.array_equal(checkpoint.dense(entry), dense[entry.prefix]), entry.prefix
