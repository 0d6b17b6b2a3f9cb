"""A native ``.gguf`` file as a dense source (decoded by qformats, one tensor at a time).

The GGUF blocks (Q4_K, Q8_0, F32, ...) are dequantized to float32 on demand, so the dense model is the
baseline: its weights happen to sit on the file's quantization grid. The Hugging Face config comes from
the file's metadata through qformats' architecture table (``qformats.gguf_file.KNOWN_ARCHITECTURES``: llama,
mistral, qwen2, qwen2moe, qwen3, qwen3moe, phi3, gemma2, gemma3, starcoder2, stablelm, nemotron, multi-query
falcon); other
architectures are refused there, by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import SourceFormatError
from .opened_source import OpenedSource, open_source_model


def gguf_config(values: dict[str, Any]) -> Any:
    """A transformers config from qformats' HF-style config dict (``rope_theta`` is passed as the config class
    takes it: transformers 5 folds it into ``rope_parameters``, per attention type where the model has several)."""
    from transformers import AutoConfig

    values = dict(values)
    model_type = values.pop("model_type")
    architectures = values.pop("architectures", None)
    config = AutoConfig.for_model(model_type, **values)
    if architectures:
        config.architectures = list(architectures)
    return config


def open_gguf_source(path: Path, dtype: torch.dtype = torch.float32) -> OpenedSource:
    """Open ``path`` (a .gguf file) lazily; tensors are decoded when a layer is materialized."""
    from qformats.gguf_file import GGUFFileError, read_gguf

    try:
        dense = read_gguf(path)
    except (GGUFFileError, ValueError) as exc:
        raise SourceFormatError(f"{path}: cannot read as a GGUF source: {exc}") from exc
    config = gguf_config(dense.config)

    def get(name: str, want: torch.dtype | None) -> torch.Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(dense.tensor(name)))  # a fresh array: no copy
        return tensor.to(want) if want is not None else tensor

    return open_source_model(
        "gguf",
        path,
        config,
        frozenset(dense.names),
        get,
        dtype,
        size_of=dense.nbytes,
        dtype_of=lambda _name: torch.float32,
    )
