"""Opening a compressed-tensors ``pack-quantized`` checkpoint directory (what llm-compressor saves).

The config comes from ``config.json``'s ``quantization_config`` (found by the usual file priority); the
weights from ``model.safetensors`` or the shards of ``model.safetensors.index.json``, read through
:class:`qformats.checkpoint.Checkpoint` (same index checks, no pickle). A quantized module is a name
prefix owning a ``weight_packed`` tensor; everything else is dense.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...checkpoint.config_files import QuantFields, find_quant_config
from ...checkpoint.reader import Checkpoint
from ...errors import CheckpointFormatError, ConfigError, LayoutError
from ...logical import QuantizedWeight
from ..registry import LayoutMeta
from .config import CompressedTensorsConfig, is_compressed_tensors, parse_compressed_tensors_config
from .layout import KEY, PACK_QUANTIZED

SUFFIXES: frozenset[str] = frozenset(
    {"weight_packed", "weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx"}
)


class CompressedTensorsCheckpoint:
    """A read-only view: ``config``, ``modules()``, ``logical_weight(name)``, ``dense_names()``, ``load(name)``."""

    def __init__(self, path: str | Path) -> None:
        root = Path(path)
        config_path, raw = find_quant_config(root)
        if not is_compressed_tensors(raw):
            raise CheckpointFormatError(
                f"{config_path}: quant_method is {raw.get('quant_method')!r}, not 'compressed-tensors'"
            )
        try:
            self.config: CompressedTensorsConfig = parse_compressed_tensors_config(raw)
        except ConfigError as exc:
            raise CheckpointFormatError(f"{config_path}: {exc}") from None
        first = self.config.schemes[0]
        fields = QuantFields(first.bits, first.group_size, first.sym, "compressed-tensors", KEY, KEY, "int32")
        self.root = root
        self._store = Checkpoint(root, fields=fields)

    @property
    def weight_map(self) -> dict[str, str]:
        return self._store.weight_map

    def load(self, name: str) -> np.ndarray:
        """One tensor by full name (BF16 read as exact float32)."""
        return self._store.load(name)

    def modules(self) -> list[str]:
        """Prefixes of every packed module, sorted."""
        return sorted(n[: -len(".weight_packed")] for n in self.weight_map if n.endswith(".weight_packed"))

    def module_tensors(self, module: str) -> dict[str, np.ndarray]:
        """The module's layout tensors keyed by suffix (``weight_packed``, ``weight_scale``, ...)."""
        found = {s: self.load(f"{module}.{s}") for s in SUFFIXES if f"{module}.{s}" in self.weight_map}
        if "weight_packed" not in found:
            raise CheckpointFormatError(f"{self.root}: module {module!r} has no weight_packed tensor")
        return found

    def meta(self, module: str, tensors: dict[str, np.ndarray] | None = None) -> LayoutMeta:
        """Reader metadata for ``module``: its config group's bits/group size, dims from ``weight_shape``."""
        scheme = self.config.scheme_for(module)
        if scheme is None:
            raise CheckpointFormatError(
                f"{self.root}: module {module!r} holds packed weights but no config group targets it "
                f"(or an ignore rule names it)"
            )
        data = self.module_tensors(module) if tensors is None else tensors
        try:
            return PACK_QUANTIZED.infer_meta(data, bits=scheme.bits, group_size=scheme.group_size, sym=scheme.sym)
        except LayoutError as exc:
            raise CheckpointFormatError(f"{self.root}: module {module!r}: {exc}") from None

    def logical_weight(self, module: str) -> QuantizedWeight:
        """The module's logical weight (errors name the directory and module)."""
        tensors = self.module_tensors(module)
        try:
            return PACK_QUANTIZED.unpack(tensors, self.meta(module, tensors))
        except LayoutError as exc:
            raise CheckpointFormatError(f"{self.root}: module {module!r}: {exc}") from None

    def dense_names(self) -> list[str]:
        """Every tensor outside a packed module's layout tensors (norms, embeddings, biases, ...)."""
        packed = set(self.modules())
        return sorted(
            n for n in self.weight_map if not (n.rpartition(".")[0] in packed and n.rpartition(".")[2] in SUFFIXES)
        )


def open_compressed_tensors(path: str | Path) -> CompressedTensorsCheckpoint:
    """Open a compressed-tensors ``pack-quantized`` checkpoint directory."""
    return CompressedTensorsCheckpoint(path)
