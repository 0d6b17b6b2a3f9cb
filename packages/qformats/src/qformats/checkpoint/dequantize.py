"""Dequantizing a whole checkpoint into a dense state dict, streamed shard by shard.

Memory stays bounded by one shard's quantized modules (see :mod:`.streaming`): every dense weight is
yielded as soon as its module is complete. ``prefix.weight`` = the module's dequantized ``[out, in]``
weight (``scales[g_idx[i], o] * (codes[o, i] - zeros[g_idx[i], o])`` in float32, then cast to
``dtype``; QQQ, ParoQuant, VPTQ and EXL3 modules: their family's float32 dequantization, then cast);
every other tensor (biases, norms, embeddings) passes through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..logical import QuantizedWeight
from .family_modules import is_family
from .modules import ModuleEntry
from .reader import Checkpoint
from .streaming import stream_converted
from .writer import WriteReport, write_checkpoint

ROW_BLOCK = 256


def dense_weight(weight: QuantizedWeight, dtype: str = "float16", rows: int = ROW_BLOCK) -> np.ndarray:
    """``weight.dequantize()`` cast to ``dtype``, ``rows`` output rows at a time.

    The one implementation is :meth:`QuantizedWeight.dequantize` (float32 arithmetic, bit-identical for
    any blocking); this only picks the block size for streamed export.
    """
    return weight.dequantize(dtype, block_elements=max(1, rows) * max(1, weight.in_features))


def iter_dense_tensors(checkpoint: Checkpoint, *, dtype: str = "float16") -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(name, array)`` of the dense state dict, shard by shard (see the module docstring)."""

    def dense(entry: ModuleEntry, tensors: dict[str, np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
        if is_family(entry.layout):
            yield f"{entry.prefix}.weight", checkpoint.dense(entry, tensors).astype(dtype)
            return
        yield f"{entry.prefix}.weight", dense_weight(checkpoint.unpack(entry, tensors), dtype)

    return stream_converted(checkpoint, dense)


def dequantize_checkpoint(
    source: str | Path,
    target: str | Path,
    *,
    dtype: str = "float16",
    max_shard_size: int | str = "4GB",
) -> WriteReport:
    """Write the dense equivalent of checkpoint ``source`` to ``target`` (no quantization config)."""
    checkpoint = Checkpoint(source)
    model_config = model_config_without_quantization(Path(source))
    return write_checkpoint(
        target,
        iter_dense_tensors(checkpoint, dtype=dtype),
        quantize_config=None,
        model_config=model_config,
        max_shard_size=max_shard_size,
    )


def model_config_without_quantization(root: Path) -> dict[str, object] | None:

    path = root / "config.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data.pop("quantization_config", None)
        return data
    return None
