"""Logical weights to (JSON tree, named arrays) and back, for checkpoint bundles; no pickle, no imports by name.

Handles :class:`qformats.logical.QuantizedWeight` and the weight-only families' logical objects (FP8, bitsandbytes
4-bit with its nested statistics, bitsandbytes int8, GGUF, QQQ, ParoQuant). Only classes in :data:`TYPES` are
ever rebuilt.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from qformats.layouts.bnb import BnB4Weight, BnB8Weight, NestedStats
from qformats.layouts.fp8 import FP8Weight
from qformats.layouts.gguf import GGUFWeight
from qformats.layouts.paroquant import ParoQuantWeight
from qformats.layouts.qqq import QQQWeight
from qformats.logical import QuantizedWeight

from .errors import ResumeError

_CLASSES = (QuantizedWeight, FP8Weight, BnB4Weight, NestedStats, BnB8Weight, GGUFWeight, QQQWeight, ParoQuantWeight)
TYPES: dict[str, type] = {cls.__name__: cls for cls in _CLASSES}


def encode_logical(value: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    """A JSON-able tree for ``value``; its arrays are added to ``arrays`` under ``prefix``-derived names."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if name not in TYPES:
            raise ResumeError(f"{prefix}: logical weight type {name} cannot be checkpointed (known: {sorted(TYPES)})")
        fields = {
            f.name: encode_logical(getattr(value, f.name), f"{prefix}.{f.name}", arrays)
            for f in dataclasses.fields(value)
            if f.init
        }
        return {"type": name, "fields": fields}
    if isinstance(value, np.ndarray):
        arrays[prefix] = np.ascontiguousarray(value)
        return {"array": prefix}
    if isinstance(value, tuple):
        return {"tuple": [encode_logical(v, f"{prefix}.{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return {"list": [encode_logical(v, f"{prefix}.{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, dict):
        return {"dict": {str(k): encode_logical(v, f"{prefix}.{k}", arrays) for k, v in value.items()}}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if isinstance(value, np.generic):
        return {"value": value.item()}
    return {"value": str(value)}  # metadata only (e.g. an object recorded in QuantizedWeight.meta)


def decode_logical(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Rebuild what :func:`encode_logical` described."""
    if "type" in tree:
        cls = TYPES.get(tree["type"])
        if cls is None:
            raise ResumeError(f"checkpoint names an unknown logical weight type {tree['type']!r}")
        return cls(**{k: decode_logical(v, arrays) for k, v in tree["fields"].items()})
    if "array" in tree:
        return arrays[tree["array"]]
    if "tuple" in tree:
        return tuple(decode_logical(v, arrays) for v in tree["tuple"])
    if "list" in tree:
        return [decode_logical(v, arrays) for v in tree["list"]]
    if "dict" in tree:
        return {k: decode_logical(v, arrays) for k, v in tree["dict"].items()}
    if "float" in tree:
        return float(tree["float"])
    return tree["value"]
