"""Driving lowbit from the tests: quantize/save through qhf, read through qformats, re-save in another layout."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from qformats.checkpoint import open_checkpoint
from qformats.checkpoint.transcode_dir import transcode_checkpoint
from qformats.logical import QuantizedWeight
from tiny_llama import PROBE


def quantize_with_lowbit(source: Path, out: Path, *, method: str, fmt: str, bits: int, sym: bool) -> Any:
    """qhf quantizes ``source`` and saves (with its own reload verification) to ``out``."""
    import qhf

    qm = qhf.load(source, {"method": method, "bits": bits, "group_size": 32, "format": fmt, "sym": sym})
    qm.quantize(samples=4, length=48)
    qm.save(out)
    return qm


def lowbit_weights(path: Path) -> dict[str, QuantizedWeight]:
    """Every quantized module's logical weight, read by qformats' checkpoint reader."""
    ck = open_checkpoint(path)
    return {entry.prefix: ck.unpack(entry) for entry in ck.modules()}


def lowbit_logits(path: Path) -> torch.Tensor:
    """Logits of the checkpoint loaded with qhf's quantized model (qkernels modules, float32)."""
    import qhf

    lm = qhf.load_quantized(path)
    with torch.no_grad():
        return lm(input_ids=PROBE, use_cache=False).logits.float()


def resave(source: Path, out: Path, target_format: str) -> None:
    """Re-save a quantized checkpoint in ``target_format`` with lowbit's directory transcoder.

    ``qformats.checkpoint.transcode_checkpoint`` transcodes every quantized module through the logical
    weight (refusing anything lossy) and rewrites the quantization config; the tokenizer files are copied.
    """
    transcode_checkpoint(source, out, to=target_format)
    for extra in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"):
        if (source / extra).is_file():
            shutil.copy(source / extra, out / extra)
