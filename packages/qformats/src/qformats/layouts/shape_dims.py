"""``infer_meta`` for layouts whose logical dims are one axis of one tensor each (times a word factor).

A layout that mixes in :class:`DimsFromShapes` declares ``in_dim`` and ``out_dim`` (which tensor, which
axis, how many logical columns one stored element holds) and gets the optional ``infer_meta`` member of
the layout protocol (see :mod:`qformats.layouts.registry`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..layout_checks import require_dims
from .registry import LayoutMeta


@dataclass(frozen=True)
class Dim:
    """A logical dimension = ``shape(tensors[tensor])[axis] * scale``."""

    tensor: str
    axis: int
    scale: int = 1

    def read(self, tensors: Mapping[str, np.ndarray]) -> int:
        return int(np.shape(tensors[self.tensor])[self.axis]) * self.scale


class DimsFromShapes:
    """Mixin giving a layout ``infer_meta`` from its ``in_dim`` / ``out_dim`` declarations."""

    key: str
    in_dim: ClassVar[Dim]
    out_dim: ClassVar[Dim]
    default_pack_dtype: ClassVar[str] = "int32"
    needs_2d: ClassVar[tuple[str, ...]] = ("qweight", "scales")

    def infer_meta(
        self,
        tensors: Mapping[str, np.ndarray],
        *,
        bits: int,
        group_size: int,
        sym: bool = True,
        pack_dtype: str | None = None,
    ) -> LayoutMeta:
        """Logical ``in``/``out`` read from the tensor shapes (raises LayoutError naming a missing tensor).

        ``pack_dtype`` defaults to the layout's word dtype (``int16`` for GEMV_FAST / LLM-AWQ).
        """
        require_dims(self.key, tensors, self.needs_2d)
        words = self.default_pack_dtype if pack_dtype is None else pack_dtype
        return LayoutMeta(bits, group_size, self.in_dim.read(tensors), self.out_dim.read(tensors), sym, words)
