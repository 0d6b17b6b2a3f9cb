"""``FinalizedModule.spill``: the packed tensors, bias and logical weight go to one file and nothing of them
stays in memory; ``tensors()`` (in pack order), ``tensor_nbytes()``, ``logical()`` and ``bias_array()`` read
them back equal."""

from __future__ import annotations

import numpy as np
from qformats.layouts.registry import get_layout
from qformats.logical import QuantizedWeight, default_g_idx, group_count
from qlooper.finalize import FinalizedModule, SpilledWeight


def _weight(out_features: int = 16, in_features: int = 64, group: int = 32) -> QuantizedWeight:
    rng = np.random.default_rng(0)
    groups = group_count(in_features, group)
    return QuantizedWeight(
        codes=rng.integers(0, 16, size=(out_features, in_features), dtype=np.uint8),
        scales=rng.random((groups, out_features), dtype=np.float32).astype(np.float16) + np.float16(0.01),
        zeros=rng.integers(1, 16, size=(groups, out_features)).astype(np.int32),
        g_idx=default_g_idx(in_features, group),
        bits=4,
        group_size=group,
        sym=False,
    )


def test_spill_drops_arrays_and_reads_them_back_equal(tmp_path) -> None:
    weight = _weight()
    packed = get_layout("gptq").pack(weight, pack_dtype="int32")
    bias = np.arange(16, dtype=np.float32)
    done = FinalizedModule("model.layers.0.mlp.up_proj", "gptq", weight, dict(packed), bias)
    sizes = done.tensor_nbytes()
    path = done.spill(tmp_path / "spill")
    assert path == tmp_path / "spill" / "model.layers.0.mlp.up_proj" / "module.safetensors"
    assert done.packed is None and done.bias is None and isinstance(done.weight, SpilledWeight)
    back = done.tensors()
    assert list(back) == list(packed)  # pack order, not the file's sorted order
    for key, array in packed.items():
        assert back[key].dtype == array.dtype and np.array_equal(back[key], array)
    assert done.tensor_nbytes() == sizes
    assert np.array_equal(done.logical().dequantize(), weight.dequantize())
    assert np.array_equal(done.bias_array(), bias)
    assert done.spill(tmp_path / "elsewhere") == path  # spilling twice keeps the first file


def test_spilled_module_without_bias(tmp_path) -> None:
    weight = _weight()
    done = FinalizedModule("m", "gptq", weight, get_layout("gptq").pack(weight, pack_dtype="int32"), None)
    done.spill(tmp_path)
    assert done.bias_array() is None
    assert done.logical().bits == 4
