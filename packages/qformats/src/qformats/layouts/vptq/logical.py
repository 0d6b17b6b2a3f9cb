"""The logical VPTQ weight: codebooks and per-group index matrices (plus outliers, norm, permutation).

Fields (``G`` groups of ``gs`` input channels, ``I = ceil(out / vl)`` index rows, ``C``/``R`` entries; see
:mod:`.spec` for how a config resolves them):

* ``centroids``         ``[G, C, vl]`` main codebooks; ``indices`` integer ``[G, I, gs]``.
* ``res_centroids``     ``[G, R, vl]`` and ``res_indices`` ``[G, I, gs]`` (residual codebook) or ``None``.
* ``outlier_centroids`` ``[Co, ovl]`` and ``outlier_indices`` ``[ceil(out / ovl), outlier_size]`` or ``None``.
* ``weight_scale`` / ``weight_bias`` ``[in]`` (``norm_dim`` 0) or ``[out]`` (1), or ``None``.
* ``perm`` integer ``[in]`` (the quantization order of the input channels) or ``None``.

Dense weight (the reference's own order of operations, each rounded to the codebook dtype): index row
``r``, column ``c`` of group ``g`` gives output rows ``r*vl .. r*vl+vl-1`` of input channel
``outlier_size + g*gs + c``: ``centroids[g, indices[g, r, c]]`` (plus ``res_centroids[g, res_indices[g, r,
c]]``); the outlier channels ``0 .. outlier_size-1`` come first from the outlier codebook; rows past
``out`` and channels past ``in`` (padding) are dropped; then the columns are reordered by
``argsort(perm)``; then ``W * weight_scale + weight_bias`` along ``norm_dim``.

``compute_dtype`` is the codebook dtype of that arithmetic: ``float16``, ``float32`` or ``bfloat16``
(numpy has no bfloat16: such codebooks arrive as float32 and each result is rounded to bfloat16 here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError
from .spec import VPTQSpec

COMPUTE_DTYPES = ("float16", "float32", "bfloat16")


def round_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (u + ((u >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)) & np.uint32(0xFFFF0000)
    result: np.ndarray = np.where(np.isnan(values), values, rounded.view(np.float32)).astype(np.float32)
    return result


@dataclass(frozen=True, eq=False)
class VPTQWeight:
    """A VPTQ weight in layout-independent form (see the module docstring)."""

    spec: VPTQSpec
    centroids: np.ndarray
    indices: np.ndarray
    res_centroids: np.ndarray | None = None
    res_indices: np.ndarray | None = None
    outlier_centroids: np.ndarray | None = None
    outlier_indices: np.ndarray | None = None
    weight_scale: np.ndarray | None = None
    weight_bias: np.ndarray | None = None
    perm: np.ndarray | None = None
    compute_dtype: str = "float16"

    def __post_init__(self) -> None:
        s = self.spec
        outlier, gs, g = s.groups
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise LayoutError(f"compute_dtype: expected one of {COMPUTE_DTYPES}, found {self.compute_dtype!r}")
        expected: dict[str, tuple[tuple[int, ...], int] | None] = {
            "centroids": ((g, s.num_centroids, s.vector_len), 0),
            "indices": ((g, s.num_indices, gs), s.num_centroids),
            "res_centroids": ((g, s.num_res_centroids, s.vector_len), 0) if s.has_residual else None,
            "res_indices": ((g, s.num_indices, gs), s.num_res_centroids) if s.has_residual else None,
            "outlier_centroids": ((s.outlier_num_centroids, s.outlier_vector_len), 0) if s.has_outliers else None,
            "outlier_indices": ((s.outlier_num_indices, outlier), s.outlier_num_centroids) if s.has_outliers else None,
        }
        norm = (s.in_features if s.norm_dim == 0 else s.out_features,)
        for name in ("weight_scale", "weight_bias"):
            expected[name] = (norm, 0) if s.enable_norm else None
        expected["perm"] = ((s.in_features,), s.in_features) if s.enable_perm else None
        for name, want in expected.items():
            value = getattr(self, name)
            if want is None:
                if value is not None:
                    raise LayoutError(f"{name}: this VPTQ spec has no {name}, but one was given")
                continue
            shape, bound = want
            if value is None or value.shape != shape:
                found = "None" if value is None else str(value.shape)
                raise LayoutError(f"{name}: expected shape {shape}, found {found}")
            if bound and value.size and (int(value.min()) < 0 or int(value.max()) >= bound):
                low, high = int(value.min()), int(value.max())
                raise LayoutError(f"{name}: expected values in [0, {bound}), found {low}..{high}")
        if self.perm is not None and not np.array_equal(np.sort(self.perm), np.arange(s.in_features)):
            raise LayoutError(f"perm: expected a permutation of 0..{s.in_features - 1}")

    def _arith(self, values: np.ndarray) -> np.ndarray:
        """``values`` rounded to the compute dtype (kept as that dtype; bfloat16 as rounded float32)."""
        if self.compute_dtype == "bfloat16":
            return round_bf16(values.astype(np.float32))
        return values.astype(self.compute_dtype)

    @staticmethod
    def _lookup(codebooks: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """``[G, N, vl]`` codebooks, ``[G, I, n]`` indices -> ``[I * vl, G * n]`` (vector along the rows)."""
        groups, rows, n = indices.shape
        vl = codebooks.shape[2]
        picked = codebooks[np.arange(groups)[:, None, None], indices.astype(np.intp)]  # [G, I, n, vl]
        return picked.transpose(1, 3, 0, 2).reshape(rows * vl, groups * n)

    def dequantize(self) -> np.ndarray:
        """float32 ``[out, in]`` (see the module docstring for the order of operations)."""
        s = self.spec
        weight = self._lookup(self._arith(self.centroids), self.indices)
        if self.res_centroids is not None and self.res_indices is not None:
            weight = self._arith(weight + self._lookup(self._arith(self.res_centroids), self.res_indices))
        weight = weight[: s.out_features]
        if self.outlier_centroids is not None and self.outlier_indices is not None:
            outliers = self._lookup(self._arith(self.outlier_centroids)[None], self.outlier_indices[None])
            weight = np.concatenate([outliers[: s.out_features], weight], axis=1)
        weight = weight[:, : s.in_features]
        if self.perm is not None:
            weight = weight[:, np.argsort(self.perm.astype(np.int64))]
        if self.weight_scale is not None and self.weight_bias is not None:
            scale, bias = self._arith(self.weight_scale), self._arith(self.weight_bias)
            if s.norm_dim == 1:
                scale, bias = scale[:, None], bias[:, None]
            weight = self._arith(self._arith(weight * scale) + bias)
        result: np.ndarray = np.ascontiguousarray(weight, dtype=np.float32)
        return result
