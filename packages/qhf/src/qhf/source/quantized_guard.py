"""Refusing a quantized checkpoint given as the source of a quantization run, naming what it is.

A directory holding ``quantize_config.json`` / ``quant_config.json``, or a ``config.json`` with a
``quantization_config`` object, is already quantized: its projections are packed tensors, so opening it
as a dense model would only say that the weights lack the dense tensors. :func:`refuse_quantized` names
the method, bits and file instead, and says what to do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import SourceFormatError
from .json_files import read_json_file

_CONFIG_FILES = ("quantize_config.json", "quant_config.json")


def _describe(config: Any) -> str:
    if not isinstance(config, dict):
        return "quantized"
    method = config.get("quant_method") or config.get("method") or "quantized"
    bits = config.get("bits") or config.get("w_bit") or config.get("wbits")
    fmt = config.get("format") or config.get("checkpoint_format") or config.get("version")
    return " ".join(str(p) for p in (method, f"{bits}-bit" if bits else None, f"format {fmt}" if fmt else None) if p)


def refuse_quantized(path: Path) -> None:
    """Raise :class:`SourceFormatError` when directory ``path`` is a quantized checkpoint (see the module)."""
    found: tuple[str, Any] | None = None
    for name in _CONFIG_FILES:
        if os.path.lexists(path / name):
            found = (name, read_json_file(path, name))
            break
    if found is None and os.path.lexists(path / "config.json"):
        data = read_json_file(path, "config.json")
        if isinstance(data, dict) and isinstance(data.get("quantization_config"), dict):
            found = ("config.json:quantization_config", data["quantization_config"])
    if found is not None:
        raise SourceFormatError(
            f"{path}: already a quantized checkpoint ({_describe(found[1])}, per {found[0]}); expected a dense "
            "model to quantize: quantize the original model, re-lay it out with `lowbit convert`, or "
            "dequantize it first (qhf.export_dense)"
        )
