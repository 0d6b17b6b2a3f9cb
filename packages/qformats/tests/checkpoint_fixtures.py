"""Small quantized checkpoints built in tests (helpers for the checkpoint and inspect tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from qformats.checkpoint import write_checkpoint
from qformats.logical import QuantizedWeight
from qformats.transcode import transcode_weight
from random_weights import random_weight

AWQ_CONFIG = {"bits": 4, "group_size": 32, "quant_method": "awq", "version": "gemm", "zero_point": True}
GPTQ_CONFIG = {"bits": 4, "group_size": 32, "sym": True, "desc_act": False, "quant_method": "gptq", "format": "gptq"}


def module_tensors(layout: str, weights: dict[str, QuantizedWeight]) -> dict[str, np.ndarray]:
    """Checkpoint tensors for modules ``prefix -> weight`` packed as ``layout`` (+ a bias and a norm)."""
    out: dict[str, np.ndarray] = {}
    for prefix, w in weights.items():
        for name, arr in transcode_weight(w, layout).tensors.items():
            out[f"{prefix}.{name}"] = arr
        out[f"{prefix}.bias"] = np.linspace(-1, 1, w.out_features).astype(np.float16)
    out["model.norm.weight"] = np.ones(8, np.float32)
    return out


def build(
    path: Path,
    layout: str = "gemm",
    *,
    sym: bool = False,
    layers: int = 3,
    max_shard_size: int | str = "4GB",
    seed: int = 0,
) -> dict[str, QuantizedWeight]:
    """Write a checkpoint with ``layers`` MLP modules; returns the logical weights by module prefix."""
    rng = np.random.default_rng(seed)
    weights = {f"model.layers.{i}.mlp.up_proj": random_weight(rng, 64, 128, 4, 32, sym=sym) for i in range(layers)}
    config = dict(AWQ_CONFIG if layout == "gemm" else GPTQ_CONFIG)
    if layout == "gemm":
        config["zero_point"] = not sym
    if layout == "gptq_v2":
        config["format"] = "gptq_v2"
    write_checkpoint(
        path,
        module_tensors(layout, weights),
        quantize_config=config,
        model_config={"model_type": "llama", "hidden_size": 128},
        max_shard_size=max_shard_size,
    )
    return weights
