"""A native llama ``.gguf`` file as a dense source (decoded by qformats, one tensor at a time).

The GGUF blocks (Q4_1, Q8_0, F32, ...) are dequantized to float32 on demand, so the dense model is the
baseline: its weights happen to sit on the file's quantization grid. The Hugging Face config comes from
the file's metadata. Only the llama architecture is mapped (qformats' mapping); others are refused there.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ..errors import SourceFormatError
from .opened_source import OpenedSource, open_source_model


def gguf_config(values: dict[str, Any]) -> Any:
    """A transformers config from qformats' HF-style config dict."""
    from transformers import AutoConfig

    values = dict(values)
    model_type = values.pop("model_type")
    values.pop("architectures", None)
    rope_theta = values.pop("rope_theta", None)
    config = AutoConfig.for_model(model_type, **values)
    if rope_theta is not None:  # transformers 5 keeps rope settings in rope_parameters
        params = dict(getattr(config, "rope_parameters", None) or {"rope_type": "default"})
        params["rope_theta"] = float(rope_theta)
        config.rope_parameters = params
        config.rope_theta = float(rope_theta)
    config.architectures = [f"{type(config).__name__.replace('Config', '')}ForCausalLM"]
    return config


def open_gguf_source(path: Path, dtype: torch.dtype = torch.float32) -> OpenedSource:
    """Open ``path`` (a .gguf file) lazily; tensors are decoded when a layer is materialized."""
    from qformats.gguf_file import GGUFFileError, read_llama_gguf

    try:
        dense = read_llama_gguf(path)
    except (GGUFFileError, ValueError) as exc:
        raise SourceFormatError(f"{path}: cannot read as a llama GGUF source: {exc}") from exc
    config = gguf_config(dense.config)
    infos = dense.reader.tensors

    def get(name: str, want: torch.dtype | None) -> torch.Tensor:
        tensor = torch.from_numpy(dense.tensor(name).copy())
        return tensor.to(want) if want is not None else tensor

    def size_of(name: str) -> int:
        return math.prod(infos[dense.names[name]].shape) * 4

    return open_source_model(
        "gguf",
        path,
        config,
        frozenset(dense.names),
        get,
        dtype,
        size_of=size_of,
        dtype_of=lambda _name: torch.float32,
    )
