"""Validation rules of the GPTQ family layouts (gptq, gptq_v2, gptq_p) over named numpy tensors.

Every finding is a :class:`~qformats.violations.Violation` with a stable rule id:

===================  ===========================================================================
rule                 meaning
===================  ===========================================================================
GPTQ-BITS            bits not supported by the layout (continuous 2/3/4/8, planar 2..8)
GPTQ-PACK-DTYPE      word dtype not allowed (3-bit and planar need int32; others int8/16/32/64)
GPTQ-GROUP-SIZE      group_size is neither -1 nor positive
GPTQ-MISSING         a required tensor (qweight, qzeros, scales) is absent
GPTQ-DTYPE           a tensor's dtype is wrong (words vs pack_dtype, float scales, integer g_idx)
GPTQ-SHAPE           a tensor's shape is wrong (expected vs found)
GPTQ-GROUPS          scales/qzeros hold a group count other than ceil(in / group_size)
GPTQ-ALIGN           a packed dimension is not a multiple of 32 where the layout requires it
GPTQ-GIDX-RANGE      g_idx holds values outside [0, G)
===================  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...logical import group_count
from ...violations import Violation
from ..registry import LayoutMeta
from .bitstream import WORD_DTYPES, stream_words

CONTINUOUS_BITS = (2, 3, 4, 8)
PLANAR_BITS = (2, 3, 4, 5, 6, 7, 8)
REQUIRED = ("qweight", "qzeros", "scales")


def allowed_pack_dtypes(bits: int, planar: bool) -> tuple[str, ...]:
    """Word dtypes a GPTQ layout may use for ``bits`` (reference: only 2/4/8 continuous are free)."""
    if planar or bits == 3:
        return ("int32",)
    return tuple(WORD_DTYPES)


def packed_rows(n: int, bits: int, pack_dtype: str, planar: bool) -> int:
    """Words needed to pack ``n`` codes of ``bits`` along one line."""
    if planar:
        return -(-n // 32) * bits
    return stream_words(n, bits, WORD_DTYPES[pack_dtype].itemsize * 8)


def needs_alignment(bits: int, planar: bool) -> bool:
    """True when packed dimensions must be multiples of 32 (3-bit continuous and every planar)."""
    return planar or bits == 3


def parameter_violations(meta: LayoutMeta, planar: bool) -> list[Violation]:
    """Violations of bits, pack dtype and group size alone (before looking at any tensor)."""
    found: list[Violation] = []
    supported = PLANAR_BITS if planar else CONTINUOUS_BITS
    if meta.bits not in supported:
        found.append(Violation("GPTQ-BITS", "<config>", f"bits in {supported}", str(meta.bits)))
    elif meta.pack_dtype not in allowed_pack_dtypes(meta.bits, planar):
        allowed = allowed_pack_dtypes(meta.bits, planar)
        found.append(Violation("GPTQ-PACK-DTYPE", "<config>", f"pack_dtype in {allowed}", str(meta.pack_dtype)))
    if meta.group_size != -1 and meta.group_size <= 0:
        found.append(Violation("GPTQ-GROUP-SIZE", "<config>", "-1 or a positive group size", str(meta.group_size)))
    if needs_alignment(meta.bits, planar):
        for name, dim, tensor in (
            ("in_features", meta.in_features, "qweight"),
            ("out_features", meta.out_features, "qzeros"),
        ):
            if dim % 32:
                found.append(Violation("GPTQ-ALIGN", tensor, f"{name} a multiple of 32 for {meta.bits}-bit", str(dim)))
    return found


def _shape(found: list[Violation], name: str, arr: np.ndarray, expected: tuple[int, ...]) -> None:
    if tuple(arr.shape) != expected:
        found.append(Violation("GPTQ-SHAPE", name, f"shape {list(expected)}", f"shape {list(arr.shape)}"))


def tensor_violations(tensors: Mapping[str, np.ndarray], meta: LayoutMeta, planar: bool) -> list[Violation]:
    """Every violation of the GPTQ rules by ``tensors`` for ``meta`` (empty when trustworthy)."""
    found = parameter_violations(meta, planar)
    if any(v.rule in ("GPTQ-BITS", "GPTQ-PACK-DTYPE", "GPTQ-GROUP-SIZE") for v in found):
        return found
    for name in REQUIRED:
        if name not in tensors:
            found.append(Violation("GPTQ-MISSING", name, "present", "absent"))
    in_, out = meta.in_features, meta.out_features
    groups = group_count(in_, meta.group_size)
    words = np.dtype(meta.pack_dtype)
    for name, rows, cols in (
        ("qweight", packed_rows(in_, meta.bits, meta.pack_dtype, planar), out),
        ("qzeros", groups, packed_rows(out, meta.bits, meta.pack_dtype, planar)),
    ):
        if name not in tensors:
            continue
        arr = np.asarray(tensors[name])
        if arr.dtype != words:
            found.append(Violation("GPTQ-DTYPE", name, str(words), str(arr.dtype)))
        if arr.ndim == 2 and name == "qzeros" and arr.shape[0] != groups and arr.shape[1] == cols:
            found.append(Violation("GPTQ-GROUPS", name, f"{groups} groups", f"{arr.shape[0]} groups"))
        else:
            _shape(found, name, arr, (rows, cols))
    if "scales" in tensors:
        scales = np.asarray(tensors["scales"])
        if scales.dtype.kind != "f":
            found.append(Violation("GPTQ-DTYPE", "scales", "a float dtype", str(scales.dtype)))
        if scales.ndim == 2 and scales.shape[1] == out and scales.shape[0] != groups:
            found.append(Violation("GPTQ-GROUPS", "scales", f"{groups} groups", f"{scales.shape[0]} groups"))
        else:
            _shape(found, "scales", scales, (groups, out))
    if "g_idx" in tensors:
        g_idx = np.asarray(tensors["g_idx"])
        if g_idx.dtype.kind not in "iu":
            found.append(Violation("GPTQ-DTYPE", "g_idx", "int32", str(g_idx.dtype)))
        elif tuple(g_idx.shape) != (in_,):
            _shape(found, "g_idx", g_idx, (in_,))
        elif in_ and (int(g_idx.min()) < 0 or int(g_idx.max()) >= groups):
            found.append(
                Violation("GPTQ-GIDX-RANGE", "g_idx", f"values in [0, {groups})", f"[{g_idx.min()}, {g_idx.max()}]")
            )
    return found
