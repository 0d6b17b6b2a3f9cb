"""Open any supported source by path: a Hugging Face directory (a .gguf file once qformats reads it)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..architectures.multimodal import is_vision_language
from ..errors import MissingFileError
from .hf_directory import open_hf_directory
from .opened_source import OpenedSource, open_source_model
from .quantized_guard import refuse_quantized
from .tensor_reader import TensorReader


def open_source(source: str | Path, dtype: torch.dtype = torch.float32) -> OpenedSource:
    """Open ``source`` lazily: nothing but the config and the tensor names is read."""
    path = Path(source)
    if not path.exists():
        raise MissingFileError(
            f"{path}: no such file or directory (expected a Hugging Face model directory or a .gguf file)"
        )
    if path.is_file() and path.suffix == ".gguf":
        from .gguf_source import open_gguf_source

        return open_gguf_source(path, dtype)
    if path.is_dir():
        refuse_quantized(path)
    directory = open_hf_directory(path)
    reader = TensorReader(directory.weight_map)
    return open_source_model(
        "hf",
        path,
        directory.config,
        frozenset(directory.weight_map),
        reader.get,
        dtype,
        extra_files=_side_files(path, is_vision_language(directory.config)),
        size_of=reader.nbytes,
        dtype_of=reader.dtype,
    )


def _side_files(path: Path, vision: bool = False) -> dict[str, Path]:
    """Files a quantized checkpoint carries over from the source (generation config, tokenizer, chat template;
    a vision-language model's processor configs too: :data:`qhf.architectures.multimodal.PROCESSOR_FILES`)."""
    from ..architectures.multimodal import PROCESSOR_FILES
    from ..tokenizer import TOKENIZER_FILES

    names = ("generation_config.json", *TOKENIZER_FILES, *(PROCESSOR_FILES if vision else ()))
    return {name: path / name for name in names if (path / name).is_file()}
