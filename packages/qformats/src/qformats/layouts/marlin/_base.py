"""What the two Marlin tile layouts share: dims from shapes, the pack preamble, the tile tensor specs.

``qweight`` int32 ``[K / 16, N * 16 / pf]`` (``pf = 32 / bits``) and ``scales`` ``[G, N]`` are common to
``marlin`` (GPTQ) and ``awq_marlin``; each adds its own tensors (``g_idx``/``g_idx_sort_indices`` or
``qzeros``) through :meth:`MarlinTileLayout.extra_specs`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from ...layout_checks import INT32_WORDS, SCALE_DTYPES, check_tensors, require_packable
from ...logical import QuantizedWeight, group_count
from ...violations import Violation
from ..registry import LayoutMeta
from ..shape_dims import Dim, DimsFromShapes
from ._rules import dims_violation, shape_reason
from ._tiles import TILE, permute_scales, tile_codes

TensorSpecs = dict[str, tuple[Sequence[str], tuple[int, ...]]]


class MarlinTileLayout(DimsFromShapes):
    """Base of the Marlin layouts (subclasses set ``key``, ``title``, ``rule`` and ``extra_specs``)."""

    title: ClassVar[str]
    rule: ClassVar[str]
    in_dim = Dim("qweight", 0, TILE)
    out_dim = Dim("scales", 1)

    def shape_reason(self, weight: QuantizedWeight) -> str | None:
        """Why the Marlin kernels' shape contract excludes ``weight`` (``None`` when it fits)."""
        return shape_reason(self.title, weight.bits, weight.group_size, weight.in_features, weight.out_features)

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        raise NotImplementedError

    def tiled(self, weight: QuantizedWeight, pack_dtype: str, codes: np.ndarray) -> dict[str, np.ndarray]:
        """``qweight`` and ``scales`` of ``weight`` (``codes`` in the row order to tile), after the checks."""
        require_packable(self.title, pack_dtype, "int32", weight, self.cannot_represent)
        return {
            "qweight": tile_codes(codes, weight.bits),
            "scales": permute_scales(weight.scales, weight.group_size, weight.in_features),
        }

    def extra_specs(self, meta: LayoutMeta, groups: int) -> TensorSpecs:
        """The layout's own tensors: ``name -> (allowed dtypes, shape)``."""
        raise NotImplementedError

    def config_violations(self, meta: LayoutMeta) -> list[Violation]:
        """Settings the layout cannot hold although the dims fit (checked before any tensor)."""
        return []

    def tile_violations(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation] | None:
        """Dims, settings, then every tensor's presence, dtype and shape; ``None`` when all of them hold."""
        k, n = meta.in_features, meta.out_features
        found = dims_violation(self.rule, shape_reason(self.title, meta.bits, meta.group_size, k, n))
        found = found or self.config_violations(meta)
        if found:
            return found
        groups = group_count(k, meta.group_size)
        specs: TensorSpecs = {
            "qweight": (INT32_WORDS, (k // TILE, n * TILE * meta.bits // 32)),
            "scales": (SCALE_DTYPES, (groups, n)),
            **self.extra_specs(meta, groups),
        }
        return None if check_tensors(tensors, specs, self.rule, found) else found
