"""Writing a checkpoint the way llm-compressor does, with compressed-tensors' own API (pack-quantized)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

SUFFIXES = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape")


def write_with_compressed_tensors(source: Path, out: Path, *, bits: int, sym: bool, group_size: int = 32) -> Path:
    """Min-max group scales (compressed-tensors' ``calculate_qparams``), then its ModelCompressor saves."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=sym, strategy="group", group_size=group_size)
    config = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=args)},
        ignore=["lm_head"],
        format="pack-quantized",
    )
    apply_quantization_config(model, config)
    for module in model.modules():
        if hasattr(module, "weight_scale"):
            w = module.weight.detach()
            grouped = w.reshape(w.shape[0], -1, group_size)
            scale, zero = calculate_qparams(grouped.amin(-1), grouped.amax(-1), args)
            module.weight_scale.data.copy_(scale)
            if getattr(module, "weight_zero_point", None) is not None:
                module.weight_zero_point.data.copy_(zero)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


def scheme_of(raw_config: dict[str, Any], group: str = "group_0") -> Any:
    from compressed_tensors.quantization import QuantizationConfig

    return QuantizationConfig.model_validate(raw_config).config_groups[group]


def decompress_with_compressed_tensors(path: Path, module: str, scheme: Any) -> torch.Tensor:
    """compressed-tensors' own unpacker and dequantizer on the stored tensors of ``module``: ``[out, in]``."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor

    state: dict[str, torch.Tensor] = {}
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        for suffix in SUFFIXES:
            if f"{module}.{suffix}" in f.keys():
                state[suffix] = f.get_tensor(f"{module}.{suffix}")
    return PackedQuantizationCompressor.decompress(state, scheme)["weight"]
