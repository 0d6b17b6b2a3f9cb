"""A Hugging Face model directory: its config and the safetensors files that hold each tensor.

Accepted layouts: ``model.safetensors`` alone, or ``model.safetensors.index.json`` plus the shards its
``weight_map`` names (any other single ``*.safetensors`` file is accepted when it is the only one).
Pickle weights (``pytorch_model.bin``, ``*.pt``) are refused: loading them can execute code.
Nothing is read from tensors here; :class:`~qhf.source.tensor_reader.TensorReader` reads lazily.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import MissingFileError, SourceFormatError
from .json_files import checked_file, read_json_file
from .remote_code import TRUST_REMOTE_CODE, refuse_remote_code

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


@dataclass(frozen=True)
class HFDirectory:
    """``path``: the directory; ``config``: its transformers config; ``weight_map``: tensor name -> file."""

    path: Path
    config: Any
    weight_map: dict[str, Path]

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(sorted(set(self.weight_map.values())))


def read_config(path: Path) -> Any:
    """The transformers config of directory ``path`` (local files only)."""
    from transformers import AutoConfig

    config_file = path / "config.json"
    if not os.path.lexists(config_file):
        raise MissingFileError(f"{path}: config.json is missing (expected a Hugging Face model directory)")
    read_json_file(path, "config.json")  # inside the directory, a regular file, UTF-8 JSON: else refused by name
    try:
        return AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=TRUST_REMOTE_CODE)
    except (ValueError, KeyError, OSError, json.JSONDecodeError) as exc:
        refusal = refuse_remote_code(path, exc)
        if refusal is not None:
            raise refusal from None
        raise SourceFormatError(f"{config_file}: transformers cannot read this config: {exc}") from exc


def _tensor_names(file: Path) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as handle:
            return list(handle.keys())
    except Exception as exc:  # safetensors raises its own SafetensorError (not exported under a stable name)
        raise SourceFormatError(f"{file}: not a readable safetensors file: {exc}") from exc


def _weight_map(path: Path) -> dict[str, Path]:
    index = path / INDEX_NAME
    if os.path.lexists(index):
        data = read_json_file(path, INDEX_NAME)
        raw = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(raw, dict) or not raw:
            raise SourceFormatError(f"{index}: 'weight_map' must be a non-empty object of tensor name -> file")
        mapping: dict[str, Path] = {}
        for name, file_name in raw.items():
            file = path / str(file_name)
            if Path(str(file_name)).name != str(file_name):
                raise SourceFormatError(f"{index}: weight_map entry {name!r} names {file_name!r}, not a plain file")
            if not os.path.lexists(file):
                raise MissingFileError(f"{path}: shard {file_name} (holding {name!r} per {INDEX_NAME}) is missing")
            checked_file(path, str(file_name))  # inside the directory and a regular file (a FIFO is never opened)
            mapping[name] = file
        return mapping
    single = path / SINGLE_NAME
    candidates = [single] if os.path.lexists(single) else sorted(path.glob("*.safetensors"))
    if len(candidates) == 1:
        checked_file(path, candidates[0].name)  # inside the directory and a regular file, before it is opened
        return dict.fromkeys(_tensor_names(candidates[0]), candidates[0])
    pickles = sorted(p.name for p in path.iterdir() if p.suffix in _PICKLE_SUFFIXES)
    if pickles:
        raise SourceFormatError(
            f"{path}: only pickle weights found ({', '.join(pickles)}); they are refused because loading them can "
            "execute code. Convert them once in a trusted environment with transformers "
            "(from_pretrained then save_pretrained(..., safe_serialization=True)) and point at the result."
        )
    if not candidates:
        raise MissingFileError(f"{path}: no weights: expected {SINGLE_NAME} or {INDEX_NAME} with its shards")
    raise SourceFormatError(
        f"{path}: {len(candidates)} safetensors files but no {INDEX_NAME} saying which tensor lives where"
    )


def open_hf_directory(path: str | Path) -> HFDirectory:
    """Read ``config.json`` and map every tensor to its file; raises MissingFileError / SourceFormatError."""
    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(f"{path}: not a directory (expected a Hugging Face model directory)")
    return HFDirectory(path=path, config=read_config(path), weight_map=_weight_map(path))
