"""Phi-3's (and Nemotron's partial) rotary settings that llama.cpp stores and transformers' GGUF loader leaves
unread.

* ``phi3.rope.dimension_count`` -> ``partial_rotary_factor`` (rotary dims / ``head_dim``; Phi-4-mini rotates
  3/4 of each head, read as 1.0 by transformers); Nemotron's the same way (read as the class default 0.5).
* LongRoPE (Phi-3 / 3.5 long-context models): llama.cpp's converter (``conversion/phi.py``) stores the
  per-frequency factors as the F32 tensors ``rope_factors_long.weight`` / ``rope_factors_short.weight``
  (``[rotary dims / 2]`` each), the pretraining context as ``rope.scaling.original_context_length`` and the
  attention scale as ``rope.scaling.attn_factor``. :func:`phi3_rope_config` puts them back as transformers'
  ``rope_scaling = {"rope_type": "longrope", "long_factor", "short_factor", "attention_factor"}`` plus
  ``original_max_position_embeddings``; the two tensors are then not parameters (the record lists them as
  skipped). Transformers' own loader drops both tensors and the keys, giving a model without the scaling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import GGUFFileError

if TYPE_CHECKING:
    from .reader import GGUFReader

LONG, SHORT = "rope_factors_long.weight", "rope_factors_short.weight"
ROPE_FACTOR_TENSORS = (LONG, SHORT)


def _factors(reader: GGUFReader, name: str, rotary: int) -> list[float]:
    values = reader.dequantize(name)
    if values.shape != (rotary // 2,) or not np.all(np.isfinite(values)):
        raise GGUFFileError(f"{reader.path}: tensor {name!r}: expected {rotary // 2} finite rope factors "
                            f"(rotary dims {rotary} / 2), found shape {values.shape}")  # fmt: skip
    return [float(v) for v in values]


def rotary_dims(config: dict[str, Any], reader: GGUFReader, arch: str, always: bool) -> int:
    """``<arch>.rope.dimension_count`` (default: the head size), set as ``partial_rotary_factor`` when it is not
    the whole head, or ``always`` (Nemotron, whose config class defaults to 0.5)."""
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    key = f"{arch}.rope.dimension_count"
    rotary = reader.value(key) if key in reader.metadata else head_dim
    if not isinstance(rotary, int) or not 0 < rotary <= head_dim or rotary % 2:
        raise GGUFFileError(f"{reader.path}: {key}: expected an even count in 2..{head_dim} (head_dim), "
                            f"found {rotary!r}")  # fmt: skip
    if always or rotary != head_dim:
        config["partial_rotary_factor"] = rotary / head_dim
    return rotary


def nemotron_rope_config(config: dict[str, Any], reader: GGUFReader) -> None:
    """Nemotron's ``partial_rotary_factor`` from ``nemotron.rope.dimension_count`` (transformers leaves it at
    the class default 0.5)."""
    rotary_dims(config, reader, "nemotron", always="nemotron.rope.dimension_count" in reader.metadata)


def phi3_rope_config(config: dict[str, Any], reader: GGUFReader) -> None:
    """Set ``partial_rotary_factor`` and, when the factor tensors are present, LongRoPE (module docstring)."""
    rotary = rotary_dims(config, reader, "phi3", always=False)
    present = [name for name in ROPE_FACTOR_TENSORS if name in reader.tensors]
    if not present:
        return
    if len(present) != 2:
        raise GGUFFileError(f"{reader.path}: LongRoPE needs both {LONG} and {SHORT}; the file holds only {present[0]}")
    original_key = "phi3.rope.scaling.original_context_length"
    original = reader.value(original_key) if original_key in reader.metadata else None
    if not isinstance(original, int) or original <= 0:
        raise GGUFFileError(f"{reader.path}: {original_key}: expected a positive integer with the rope factor "
                            f"tensors, found {original!r}")  # fmt: skip
    scaling: dict[str, Any] = {
        "rope_type": "longrope",
        "long_factor": _factors(reader, LONG, rotary),
        "short_factor": _factors(reader, SHORT, rotary),
    }
    if "phi3.rope.scaling.attn_factor" in reader.metadata:
        scaling["attention_factor"] = float(reader.value("phi3.rope.scaling.attn_factor"))
    config["original_max_position_embeddings"] = original
    config["rope_scaling"] = scaling
