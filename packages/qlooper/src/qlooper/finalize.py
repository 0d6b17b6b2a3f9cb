"""Finalizers: pack a solved module into a target layout, optionally offload it, optionally replace it.

Finalizers run on a worker pool after the layer's forward replay (so replacing modules never races a
forward of that layer). The loop treats nothing as durable until a boundary has waited for every
finalizer; a finalizer's exception stops the run with that exception.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from qformats.layouts.registry import get_layout
from qformats.logical import QuantizedWeight
from safetensors.numpy import load_file, save_file
from torch import nn

from .errors import ProcessorError
from .processors.base import ModuleResult

ReplaceFn = Callable[[str, nn.Module, "FinalizedModule"], "nn.Module | None"]


@dataclass
class FinalizedModule:
    """A packed module: the logical weight, its layout tensors (in memory or offloaded), bias, timings.

    ``packed`` maps tensor names (``qweight``, ``qzeros``, ``scales``, ``g_idx``, ...) to numpy arrays; it is
    ``None`` when offloaded, and :meth:`tensors` reads them back from ``offload_path``.
    """

    name: str
    format: str
    weight: QuantizedWeight | Any  # QuantizedWeight, or a weight-only family's logical object
    packed: dict[str, np.ndarray] | None
    bias: np.ndarray | None
    offload_path: Path | None = None
    seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)

    def tensors(self) -> dict[str, np.ndarray]:
        """The layout tensors (read from the offload file when they are not held in memory)."""
        if self.packed is not None:
            return self.packed
        if self.offload_path is None:
            raise ProcessorError(f"module {self.name}: packed tensors are neither in memory nor offloaded")
        return {k: v for k, v in load_file(str(self.offload_path)).items() if k != "bias"}


def _write_offload(root: Path, name: str, tensors: dict[str, np.ndarray]) -> Path:
    """Write ``root/<name>/module.safetensors`` through a temporary sibling directory and a rename."""
    final = root / name
    tmp = root / f".{name}.{os.getpid()}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp / "module.safetensors"))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final / "module.safetensors"


def finalize_module(
    solved: ModuleResult,
    module: nn.Module,
    *,
    format: str,
    pack_dtype: str = "int32",
    offload_dir: Path | None = None,
    replace: Callable[[FinalizedModule], None] | None = None,
    pack: Callable[[Any], dict[str, np.ndarray]] | None = None,
) -> FinalizedModule:
    """Pack ``solved`` for ``format`` via qformats' layout registry, or with ``pack(logical)`` when given."""
    start = time.perf_counter()
    weight = solved.result.weight
    if pack is not None:
        packed = pack(weight)
    else:
        layout = get_layout(format)
        why = layout.cannot_represent(weight)
        if why is not None:
            raise ProcessorError(f"module {solved.name}: format {format!r} cannot hold its quantized weight: {why}")
        packed = layout.pack(weight, pack_dtype=pack_dtype)
    bias_t = getattr(module, "bias", None)
    bias = bias_t.detach().float().cpu().numpy() if bias_t is not None else None
    done = FinalizedModule(solved.name, format, weight, packed, bias)
    if offload_dir is not None:
        tensors = dict(packed) if bias is None else {**packed, "bias": bias}
        done.offload_path = _write_offload(offload_dir, solved.name, tensors)
        done.packed = None
    if replace is not None:
        replace(done)
    done.seconds = time.perf_counter() - start
    return done
