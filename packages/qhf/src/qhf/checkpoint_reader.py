"""Reading a saved quantized checkpoint: its quantization config and each module's layout tensors.

Config priority follows the reference: ``quantize_config.json``, then ``quant_config.json``, then
``config.json``'s ``quantization_config`` — the first that exists wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight

from .errors import MissingFileError, SourceFormatError
from .quant_config import QuantSettings, parse_settings
from .source.hf_directory import HFDirectory, open_hf_directory
from .source.tensor_reader import TensorReader

CONFIG_FILES = ("quantize_config.json", "quant_config.json")


def read_quant_settings(directory: Path) -> tuple[QuantSettings, str]:
    """The checkpoint's settings and the file they came from."""
    for name in CONFIG_FILES:
        path = directory / name
        if path.is_file():
            try:
                return parse_settings(json.loads(path.read_text(encoding="utf-8"))), name
            except json.JSONDecodeError as exc:
                raise SourceFormatError(f"{path}: not valid JSON: {exc}") from exc
    path = directory / "config.json"
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data.get("quantization_config"), dict):
            return parse_settings(data["quantization_config"]), "config.json"
    raise MissingFileError(
        f"{directory}: no quantization config (looked for {', '.join(CONFIG_FILES)} and config.json's "
        "quantization_config); this does not look like a quantized checkpoint"
    )


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.to(torch.float32)
    return tensor.numpy()


@dataclass
class QuantizedCheckpoint:
    """An opened checkpoint directory: ``settings``, ``directory`` (config + weight map), lazy ``reader``."""

    directory: HFDirectory
    settings: QuantSettings
    settings_file: str
    reader: TensorReader

    def is_quantized(self, module: str) -> bool:
        return f"{module}.qweight" in self.reader or f"{module}.weight_packed" in self.reader

    def module_tensors(self, module: str) -> dict[str, np.ndarray]:
        """Every tensor stored under ``module.`` (keys without the prefix), as numpy arrays."""
        prefix = module + "."
        return {
            n[len(prefix) :]: _numpy(self.reader.get(n))
            for n in self.reader.names()
            if n.startswith(prefix) and "." not in n[len(prefix) :]
        }

    def layout_meta(self, in_features: int, out_features: int) -> LayoutMeta:
        s = self.settings
        return LayoutMeta(s.bits, s.group_size, in_features, out_features, s.sym, s.pack_dtype)

    def logical_weight(self, module: str, in_features: int, out_features: int) -> QuantizedWeight:
        """The module's logical weight, unpacked from its layout tensors."""
        tensors = {k: v for k, v in self.module_tensors(module).items() if k != "bias"}
        return get_layout(self.settings.format).unpack(tensors, self.layout_meta(in_features, out_features))


def open_quantized_checkpoint(path: str | Path) -> QuantizedCheckpoint:
    path = Path(path)
    directory = open_hf_directory(path)
    settings, settings_file = read_quant_settings(path)
    return QuantizedCheckpoint(directory, settings, settings_file, TensorReader(directory.weight_map))


def load_config_json(path: Path) -> dict[str, Any]:
    return json.loads((path / "config.json").read_text(encoding="utf-8"))
