"""A symmetric 4-bit gptq checkpoint of a tiny model, written by qformats' writer (for reader tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from qformats.checkpoint import write_checkpoint
from qformats.logical import QuantizedWeight, default_g_idx, group_count
from qformats.transcode import transcode_weight
from safetensors.numpy import load_file

BITS, GROUP = 4, 32
EMBED = "model.embed_tokens.weight"
CONFIG = {"bits": BITS, "group_size": GROUP, "sym": True, "desc_act": False, "quant_method": "gptq", "format": "gptq"}


def sym_weight(rng: np.random.Generator, out: int, in_: int) -> QuantizedWeight:
    groups = group_count(in_, GROUP)
    return QuantizedWeight(
        codes=rng.integers(0, 16, (out, in_)).astype(np.uint8),
        scales=(rng.random((groups, out)) * 0.02 + 0.001).astype(np.float16),
        zeros=np.full((groups, out), 8, dtype=np.int32),
        g_idx=default_g_idx(in_, GROUP),
        bits=BITS,
        group_size=GROUP,
        sym=True,
    )


def sym_tensors(src: Path) -> dict[str, np.ndarray]:
    """Every decoder projection of ``src`` as a random symmetric gptq module; the rest as stored."""
    rng = np.random.default_rng(3)
    tensors: dict[str, np.ndarray] = {}
    for name, value in load_file(str(src / "model.safetensors")).items():
        if ".layers." in name and name.endswith("proj.weight"):
            module = name[: -len(".weight")]
            packed = transcode_weight(sym_weight(rng, value.shape[0], value.shape[1]), "gptq").tensors
            tensors.update({f"{module}.{k}": v for k, v in packed.items()})
        else:
            tensors[name] = value
    return tensors


def write_sym(src: Path, out: Path, tensors: dict[str, np.ndarray]) -> Path:
    """Write ``tensors`` as a gptq checkpoint at ``out`` (no write-time validation) with ``src``'s tokenizer."""
    model_config = json.loads((src / "config.json").read_text())
    model_config["quantization_config"] = CONFIG
    write_checkpoint(out, tensors, quantize_config=CONFIG, model_config=model_config, validate=False)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    return out
