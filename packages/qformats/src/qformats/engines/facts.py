"""What an engine's load rules look at: a checkpoint's quantization settings, dense dtype and linear shapes.

Shapes are logical: ``in_features`` (K, the reduction dimension) and ``out_features`` (N) of every
quantized linear module, as a kernel sees them without tensor parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

SAFETENSORS = "safetensors"
GGUF = "gguf"


@dataclass(frozen=True)
class LinearShape:
    """One quantized linear module: its dotted ``name``, ``in_features`` (K) and ``out_features`` (N); ``bits``:
    its own code width when a ``dynamic`` rule gives it one (None: the checkpoint's ``bits``)."""

    name: str
    in_features: int
    out_features: int
    bits: int | None = None


@dataclass(frozen=True)
class CheckpointFacts:
    """A checkpoint as engines see it.

    ``format``: the checkpoint format/layout key (``gptq``, ``gptq_v2``, ``marlin``, ``gemm`` ...);
    ``bits``, ``group_size`` (-1: per channel), ``sym``, ``desc_act``: the quantization settings (a module's own
    width, from ``dynamic`` rules, is its ``LinearShape.bits``);
    ``dtype``: ``config.json``'s dtype of the dense tensors and activations (``float16`` ...; None: unstated);
    ``modules``: every quantized linear; ``container``: ``"safetensors"`` (a directory) or ``"gguf"`` (a file).
    """

    format: str
    bits: int
    group_size: int
    sym: bool
    desc_act: bool
    dtype: str | None
    modules: tuple[LinearShape, ...]
    container: str = SAFETENSORS

    def module_bits(self, module: LinearShape) -> int:
        """``module``'s code width: its own, else the checkpoint's."""
        return self.bits if module.bits is None else module.bits

    def widths(self) -> tuple[int, ...]:
        """Every code width the checkpoint stores (the config's ``bits`` and each module's own), ascending."""
        return tuple(sorted({self.bits, *(m.bits for m in self.modules if m.bits is not None)}))

    def changed(self, **fields: Any) -> CheckpointFacts:
        """A copy with ``fields`` replaced."""
        return replace(self, **fields)
