"""Finalizers: pack a solved module into a target layout, optionally offload it, optionally replace it.

Finalizers run on a worker pool after the layer's forward replay (so replacing modules never races a
forward of that layer). The loop treats nothing as durable until a boundary has waited for every
finalizer; a finalizer's exception stops the run with that exception.

A caller that must not keep finished modules in memory (qhf's streaming quantization) calls
:meth:`FinalizedModule.spill`: the packed tensors, the bias and the logical weight go to one safetensors file
and the module keeps only its path (:class:`SpilledWeight`); :meth:`FinalizedModule.tensors`,
:meth:`~FinalizedModule.logical` and :meth:`~FinalizedModule.bias_array` re-read it.
"""

from __future__ import annotations

import json
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
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
from torch import nn

from .errors import ProcessorError
from .logical_codec import decode_logical, encode_logical
from .processors.base import ModuleResult

#: Name prefix of the logical weight's arrays in a spill file (``logical|codes``, ``logical|scales`` ...).
LOGICAL_PREFIX = "logical|"

ReplaceFn = Callable[[str, nn.Module, "FinalizedModule"], "nn.Module | None"]


@dataclass(frozen=True)
class SpilledWeight:
    """A finished module's logical weight written to ``path`` by :meth:`FinalizedModule.spill`: only the
    path and ``tree`` (the :mod:`qlooper.logical_codec` description, no arrays) stay in memory."""

    path: Path
    tree: Any

    def load(self) -> Any:
        """The logical weight, decoded from the file (its arrays read now)."""
        with safe_open(str(self.path), framework="numpy") as handle:
            arrays = {k: handle.get_tensor(k) for k in handle.keys() if k.startswith(LOGICAL_PREFIX)}
        return decode_logical(self.tree, arrays)


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
        """The layout tensors (read from the offload or spill file when they are not held in memory), in the
        order the layout packed them."""
        if self.packed is not None:
            return self.packed
        path = self._file()
        order = _packed_order(path)
        if order is None:
            return {k: v for k, v in load_file(str(path)).items() if k != "bias"}
        with safe_open(str(path), framework="numpy") as handle:
            return {k: handle.get_tensor(k) for k in order}

    def tensor_nbytes(self) -> dict[str, int]:
        """Bytes of each layout tensor, in :meth:`tensors` order (from the file header when spilled)."""
        if self.packed is not None:
            return {k: int(v.nbytes) for k, v in self.packed.items()}
        path = self._file()
        with safe_open(str(path), framework="numpy") as handle:
            order = _packed_order(path) or [k for k in handle.keys() if k != "bias"]
            return {k: _slice_nbytes(handle.get_slice(k)) for k in order}

    def logical(self) -> Any:
        """The logical weight (decoded from the spill file when :meth:`spill` dropped it from memory)."""
        return self.weight.load() if isinstance(self.weight, SpilledWeight) else self.weight

    def bias_array(self) -> np.ndarray | None:
        """The bias (float32 ``[out]``), read from the spill file when :meth:`spill` dropped it; None: no bias."""
        if self.bias is not None or not isinstance(self.weight, SpilledWeight):
            return self.bias
        with safe_open(str(self.weight.path), framework="numpy") as handle:
            return handle.get_tensor("bias") if "bias" in handle.keys() else None

    def spill(self, root: Path) -> Path:
        """Write the packed tensors, the bias and the logical weight to ``root/<name>/module.safetensors``
        and drop them from memory (``packed``/``bias`` None, ``weight`` a :class:`SpilledWeight`); returns
        the file. Spilling a spilled module does nothing."""
        if isinstance(self.weight, SpilledWeight):
            return self.weight.path
        packed = self.tensors()
        arrays: dict[str, np.ndarray] = {}
        tree = encode_logical(self.weight, LOGICAL_PREFIX + "weight", arrays)  # arrays: logical|weight.codes ...
        tensors = {**packed, **arrays}
        if self.bias is not None:
            tensors["bias"] = self.bias
        metadata = {"packed": json.dumps(list(packed)), "logical": json.dumps(tree)}
        path = _write_offload(root, self.name, tensors, metadata)
        self.weight = SpilledWeight(path, tree)
        self.packed, self.bias, self.offload_path = None, None, path
        return path

    def _file(self) -> Path:
        path = self.weight.path if isinstance(self.weight, SpilledWeight) else self.offload_path
        if path is None:
            raise ProcessorError(f"module {self.name}: packed tensors are neither in memory nor offloaded")
        return path


def _packed_order(path: Path) -> list[str] | None:
    """The layout tensors' names in pack order when ``path`` is a spill file (None: an offload file)."""
    with safe_open(str(path), framework="numpy") as handle:
        order = (handle.metadata() or {}).get("packed")
    return None if order is None else [str(k) for k in json.loads(order)]


def _slice_nbytes(view: Any) -> int:
    """Bytes of a safetensors slice (shape x element size of its dtype), without reading it."""
    sizes = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2}
    count = 1
    for dim in view.get_shape():
        count *= int(dim)
    return count * sizes.get(view.get_dtype(), 1)


def _write_offload(
    root: Path, name: str, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None
) -> Path:
    """Write ``root/<name>/module.safetensors`` (with ``metadata`` in its header) through a temporary sibling
    directory and a rename."""
    final = root / name
    tmp = root / f".{name}.{os.getpid()}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    arrays = {k: np.asarray(v, order="C") for k, v in tensors.items()}  # (ascontiguousarray makes 0-d 1-d)
    save_file(arrays, str(tmp / "module.safetensors"), metadata)
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
