"""A GPT-QModel-written asymmetric gptq (v1) checkpoint with true zeros of 0 loads with the right weights.

GPT-QModel stores v1 zeros as the true-zero words minus 0x11111111 (4-bit), so a true zero of 0 becomes the
field 15 and borrows one from the next field; qhf's reader gets modules through qformats' reader, which
undoes that word arithmetic when ``meta.quantizer`` names GPT-QModel.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import qhf
import torch
from qformats.checkpoint import write_checkpoint
from qformats.layouts.gptq.zeros import v2_to_v1
from qformats.logical import QuantizedWeight, default_g_idx, group_count
from qformats.transcode import transcode_weight
from qhf.checkpoint_reader import open_quantized_checkpoint
from safetensors.numpy import load_file

BITS, GROUP = 4, 32


def _asymmetric_weight(rng: np.random.Generator, out: int, in_: int) -> QuantizedWeight:
    """Random asymmetric 4-bit weight whose first group holds true zeros of 0 in its first three columns."""
    groups = group_count(in_, GROUP)
    zeros = rng.integers(1, 16, (groups, out)).astype(np.int32)
    zeros[0, :3] = 0
    return QuantizedWeight(
        codes=rng.integers(0, 16, (out, in_)).astype(np.uint8),
        scales=(rng.random((groups, out)) * 0.02 + 0.001).astype(np.float16),
        zeros=zeros,
        g_idx=default_g_idx(in_, GROUP),
        bits=BITS,
        group_size=GROUP,
        sym=False,
    )


def _write_reference_v1(src: Path, out: Path, quantizer: list[str] | None) -> dict[str, QuantizedWeight]:
    """Quantize every decoder projection of ``src`` to a random weight, written as GPT-QModel writes v1."""
    dense = load_file(str(src / "model.safetensors"))
    rng = np.random.default_rng(5)
    tensors: dict[str, np.ndarray] = {}
    weights: dict[str, QuantizedWeight] = {}
    for name, value in dense.items():
        if ".layers." in name and name.endswith("proj.weight"):
            module = name[: -len(".weight")]
            weight = _asymmetric_weight(rng, value.shape[0], value.shape[1])
            packed = dict(transcode_weight(weight, "gptq_v2").tensors)
            conversion = v2_to_v1(packed["qzeros"], BITS)
            assert conversion.overflow_fields > 0  # the fixture really exercises the borrow
            packed["qzeros"] = conversion.qzeros
            tensors.update({f"{module}.{k}": v for k, v in packed.items()})
            weights[module] = weight
        else:
            tensors[name] = value
    config = {"bits": BITS, "group_size": GROUP, "sym": False, "desc_act": False, "quant_method": "gptq"}
    config["format"] = "gptq"
    if quantizer is not None:
        config["meta"] = {"quantizer": quantizer}
    model_config = json.loads((src / "config.json").read_text())
    model_config["quantization_config"] = config
    write_checkpoint(out, tensors, quantize_config=config, model_config=model_config)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    return weights


def test_reference_v1_zero_of_zero_loads_with_the_right_weights(tmp_path, tiny_dirs) -> None:
    out = tmp_path / "v1"
    weights = _write_reference_v1(tiny_dirs("llama"), out, ["gptqmodel:7.7.0"])
    checkpoint = open_quantized_checkpoint(out)
    lm = qhf.load_quantized(out)
    assert len(lm.backends) == len(weights) == 14
    x = torch.randn(3, 64, dtype=torch.float32)
    for module, weight in weights.items():
        expected = weight.dequantize()
        logical = checkpoint.logical_weight(module, weight.in_features, weight.out_features)
        assert np.array_equal(logical.dequantize(), expected), module
        layer = lm.model.get_submodule(module)
        assert np.array_equal(layer.dequantized_weight().numpy(), expected), module
        if weight.in_features == 64:
            want = x @ torch.from_numpy(expected).T
            assert torch.allclose(layer(x), want, atol=1e-4, rtol=1e-4), module


def test_without_a_reference_quantizer_the_fields_are_read_one_by_one(tmp_path, tiny_dirs) -> None:
    # The same words without meta.quantizer follow the field-by-field v1 convention: zero 0 is not recovered.
    out = tmp_path / "plain"
    weights = _write_reference_v1(tiny_dirs("llama"), out, None)
    checkpoint = open_quantized_checkpoint(out)
    module, weight = next(iter(weights.items()))
    logical = checkpoint.logical_weight(module, weight.in_features, weight.out_features)
    assert not np.array_equal(logical.zeros, weight.zeros)
    assert logical.zeros[0, 0] == 16  # field 15 + 1, read on its own


def test_logical_weight_names_the_module_on_a_dimension_mismatch(tmp_path, tiny_dirs) -> None:
    out = tmp_path / "v1"
    weights = _write_reference_v1(tiny_dirs("llama"), out, ["gptqmodel:7.7.0"])
    module, weight = next(iter(weights.items()))
    checkpoint = open_quantized_checkpoint(out)
    with pytest.raises(qhf.errors.SourceFormatError, match=module.replace(".", r"\.")):
        checkpoint.logical_weight(module, weight.in_features + 32, weight.out_features)
