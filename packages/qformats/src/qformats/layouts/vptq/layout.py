"""VPTQ module tensors (FORMAT ``vptq``), named as the reference's module state dict names them.

Tensors (``G``, ``gs``, ``I`` and the rest from :class:`~.spec.VPTQSpec`; codebooks float16, bfloat16 or
float32 as saved):

* ``centroids.weight``         ``[G, C * vl]`` (codebook ``g`` row-major: entry ``e`` at ``e*vl .. e*vl+vl-1``)
* ``indices``                  int32 ``[G, I, ceil(gs * (index_bits + res_bits) / 32)]``: each row a bitstream
  (:mod:`.bitstream`) of ``index | residual << index_bits``
* ``res_centroids.weight``     ``[G, R * vl]`` when the residual codebook is on
* ``outlier_centroids.weight`` ``[1, Co * ovl]`` and ``outlier_indices`` int32 ``[1, ceil(out / ovl),
  outlier_size]`` (plain indices) when the outlier codebook is on
* ``weight_scale``, ``weight_bias`` ``[in]`` or ``[out]`` (``enable_norm``); ``perm`` int32 ``[in]`` (``enable_perm``)

Rules (ids ``VPTQ-*``): presence of what the spec enables (``-MISSING``), no tensor the spec disables
(``-UNEXPECTED``), dtypes and shapes, index values inside their codebooks (``-INDEX-RANGE``), ``perm`` a
permutation (``-PERM``), finite codebooks and norm tensors (``-VALUE``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...layout_checks import check_tensors, raise_on_violations
from ...violations import Violation
from .bitstream import pack_bits, unpack_bits
from .logical import VPTQWeight
from .spec import VPTQSpec

RULE = "VPTQ"
TITLE = "VPTQ"
CODEBOOK_DTYPES = ("float16", "float32", "bfloat16")
INDEX_DTYPES = ("int32",)
OPTIONAL = (
    "res_centroids.weight", "outlier_centroids.weight", "outlier_indices", "weight_scale", "weight_bias", "perm",
)  # fmt: skip


def tensor_specs(spec: VPTQSpec) -> dict[str, tuple[tuple[str, ...], tuple[int, ...]]]:
    """``name -> (allowed dtypes, shape)`` of every tensor ``spec`` calls for."""
    outlier, _, groups = spec.groups
    specs = {
        "centroids.weight": (CODEBOOK_DTYPES, (groups, spec.num_centroids * spec.vector_len)),
        "indices": (INDEX_DTYPES, (groups, spec.num_indices, spec.packed_words)),
    }
    if spec.has_residual:
        specs["res_centroids.weight"] = (CODEBOOK_DTYPES, (groups, spec.num_res_centroids * spec.vector_len))
    if spec.has_outliers:
        specs["outlier_centroids.weight"] = (CODEBOOK_DTYPES, (1, spec.outlier_num_centroids * spec.outlier_vector_len))
        specs["outlier_indices"] = (INDEX_DTYPES, (1, spec.outlier_num_indices, outlier))
    if spec.enable_norm:
        norm = (spec.in_features if spec.norm_dim == 0 else spec.out_features,)
        specs["weight_scale"] = (CODEBOOK_DTYPES, norm)
        specs["weight_bias"] = (CODEBOOK_DTYPES, norm)
    if spec.enable_perm:
        specs["perm"] = (("int32", "int64"), (spec.in_features,))
    return specs


def pack_vptq(weight: VPTQWeight) -> dict[str, np.ndarray]:
    """``weight`` as the reference's VPTQ module tensors (index words byte-identical to its packer)."""
    s = weight.spec
    groups = s.groups[2]
    merged = weight.indices.astype(np.int64)
    if weight.res_indices is not None:
        merged = merged | (weight.res_indices.astype(np.int64) << np.int64(s.index_bits))
    tensors = {
        "centroids.weight": np.ascontiguousarray(weight.centroids.reshape(groups, -1)),
        "indices": pack_bits(merged, s.index_bits + s.res_bits),
    }
    if weight.res_centroids is not None:
        tensors["res_centroids.weight"] = np.ascontiguousarray(weight.res_centroids.reshape(groups, -1))
    if weight.outlier_centroids is not None and weight.outlier_indices is not None:
        tensors["outlier_centroids.weight"] = np.ascontiguousarray(weight.outlier_centroids.reshape(1, -1))
        tensors["outlier_indices"] = weight.outlier_indices.astype(np.int32)[None]
    for name in ("weight_scale", "weight_bias"):
        value = getattr(weight, name)
        if value is not None:
            tensors[name] = np.array(value, copy=True)
    if weight.perm is not None:
        tensors["perm"] = weight.perm.astype(np.int32)
    return tensors


def validate_vptq(tensors: Mapping[str, np.ndarray], spec: VPTQSpec) -> list[Violation]:
    """Every broken VPTQ rule for ``tensors`` read under ``spec`` (see the module docstring)."""
    specs = tensor_specs(spec)
    found = [
        Violation(f"{RULE}-UNEXPECTED", name, "absent (the config disables it)", "present")
        for name in OPTIONAL
        if name in tensors and name not in specs
    ]
    if not check_tensors(tensors, specs, RULE, found):
        return found
    _, gs, _ = spec.groups
    indices = unpack_bits(np.asarray(tensors["indices"]), spec.index_bits + spec.res_bits, gs)
    if int((indices & ((1 << spec.index_bits) - 1)).max(initial=0)) >= spec.num_centroids:
        found.append(Violation(f"{RULE}-INDEX-RANGE", "indices", f"indices below {spec.num_centroids}", "larger"))
    if spec.has_residual and int((indices >> spec.index_bits).max(initial=0)) >= spec.num_res_centroids:
        found.append(
            Violation(f"{RULE}-INDEX-RANGE", "indices", f"residual indices below {spec.num_res_centroids}", "larger")
        )
    if spec.has_outliers:
        outliers = np.asarray(tensors["outlier_indices"])
        if outliers.size and (int(outliers.min()) < 0 or int(outliers.max()) >= spec.outlier_num_centroids):
            found.append(
                Violation(f"{RULE}-INDEX-RANGE", "outlier_indices", f"in [0, {spec.outlier_num_centroids})", "outside")
            )
    if spec.enable_perm and not np.array_equal(np.sort(np.asarray(tensors["perm"])), np.arange(spec.in_features)):
        found.append(Violation(f"{RULE}-PERM", "perm", f"a permutation of 0..{spec.in_features - 1}", "not one"))
    for name, (dtypes, _) in specs.items():
        if dtypes == CODEBOOK_DTYPES and not np.isfinite(np.asarray(tensors[name], dtype=np.float32)).all():
            found.append(Violation(f"{RULE}-VALUE", name, "finite values", "inf or nan"))
    return found


def unpack_vptq(tensors: Mapping[str, np.ndarray], spec: VPTQSpec, *, compute_dtype: str | None = None) -> VPTQWeight:
    """Read VPTQ tensors as a :class:`VPTQWeight`; raises :class:`LayoutError` listing every violation.

    ``compute_dtype`` defaults to the main codebook's dtype; pass ``"bfloat16"`` for bfloat16 checkpoints
    (their codebooks arrive as float32).
    """
    raise_on_violations(TITLE, validate_vptq(tensors, spec))
    _, gs, groups = spec.groups
    words = unpack_bits(np.asarray(tensors["indices"]), spec.index_bits + spec.res_bits, gs)
    main = np.asarray(tensors["centroids.weight"])
    fields: dict[str, np.ndarray | None] = {
        "centroids": main.reshape(groups, spec.num_centroids, spec.vector_len).copy(),
        "indices": (words & ((1 << spec.index_bits) - 1)).astype(np.int32),
    }
    if spec.has_residual:
        res = np.asarray(tensors["res_centroids.weight"])
        fields["res_centroids"] = res.reshape(groups, spec.num_res_centroids, spec.vector_len).copy()
        fields["res_indices"] = (words >> spec.index_bits).astype(np.int32)
    if spec.has_outliers:
        out_books = np.asarray(tensors["outlier_centroids.weight"])
        fields["outlier_centroids"] = out_books.reshape(spec.outlier_num_centroids, spec.outlier_vector_len).copy()
        fields["outlier_indices"] = np.asarray(tensors["outlier_indices"])[0].astype(np.int32)
    for name in ("weight_scale", "weight_bias", "perm"):
        if name in tensors:
            fields[name] = np.array(tensors[name], copy=True)
    dtype = compute_dtype if compute_dtype is not None else str(main.dtype)
    return VPTQWeight(spec, compute_dtype=dtype, **fields)  # type: ignore[arg-type]
