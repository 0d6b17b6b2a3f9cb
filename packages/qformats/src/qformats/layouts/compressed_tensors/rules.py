"""Validation rules of compressed-tensors' ``pack-quantized`` module tensors (named numpy arrays).

===================  ===========================================================================
rule                 meaning
===================  ===========================================================================
CT-BITS              bits outside 1..8
CT-GROUP-SIZE        group_size is neither -1 nor positive
CT-MISSING           ``weight_packed`` or ``weight_scale`` is absent
CT-DTYPE             packed words / zero points not int32, scales not float, g_idx not integer
CT-SHAPE             a tensor's shape differs from what ``meta`` implies (expected vs found)
CT-WEIGHT-SHAPE      ``weight_shape`` does not hold ``[out, in]`` of ``meta``
CT-GROUPS            ``weight_scale`` holds a group count other than ceil(in / group_size)
CT-GIDX-RANGE        ``weight_g_idx`` holds values outside [0, G)
===================  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...logical import group_count
from ...violations import Violation
from ..registry import LayoutMeta
from .bitstream import dense_words

REQUIRED = ("weight_packed", "weight_scale")


def _shape(arr: np.ndarray) -> str:
    return str(tuple(int(d) for d in arr.shape))


def scale_matrix(scale: np.ndarray, out: int) -> np.ndarray | None:
    """``weight_scale`` as ``[out, G]``: tensor-strategy scalars (shape ``[]``/``[1]``) broadcast to ``[out, 1]``."""
    if scale.ndim == 2:
        return scale
    if scale.size == 1:
        return np.broadcast_to(scale.reshape(1, 1), (out, 1))
    return None


def tensor_violations(tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
    """Every rule the module's tensors break for ``meta``."""
    found: list[Violation] = []
    if not 1 <= meta.bits <= 8:
        found.append(Violation("CT-BITS", "<config>", "num_bits in 1..8", str(meta.bits)))
    if meta.group_size != -1 and meta.group_size <= 0:
        found.append(Violation("CT-GROUP-SIZE", "<config>", "-1 or a positive group size", str(meta.group_size)))
    missing = [name for name in REQUIRED if name not in tensors]
    found += [Violation("CT-MISSING", name, "present", "absent") for name in missing]
    if found:
        return found
    out, in_, bits = meta.out_features, meta.in_features, meta.bits
    groups = group_count(in_, meta.group_size)
    packed = np.asarray(tensors["weight_packed"])
    if packed.dtype != np.int32:
        found.append(Violation("CT-DTYPE", "weight_packed", "int32", str(packed.dtype)))
    want = (out, dense_words(in_, bits))
    if packed.shape != want:
        found.append(Violation("CT-SHAPE", "weight_packed", f"{want} = [out, ceil(in*b/32)]", _shape(packed)))
    scale = np.asarray(tensors["weight_scale"])
    if scale.dtype.kind != "f":
        found.append(Violation("CT-DTYPE", "weight_scale", "a float dtype", str(scale.dtype)))
    matrix = scale_matrix(scale, out)
    if matrix is None or matrix.shape[0] != out:
        found.append(Violation("CT-SHAPE", "weight_scale", f"[{out}, G] (or a single tensor scale)", _shape(scale)))
    elif matrix.shape[1] != groups:
        want_groups = f"{groups} groups = ceil({in_}/{meta.group_size})"
        found.append(Violation("CT-GROUPS", "weight_scale", want_groups, str(matrix.shape[1])))
    if "weight_zero_point" in tensors:
        zp = np.asarray(tensors["weight_zero_point"])
        if zp.dtype != np.int32:
            found.append(Violation("CT-DTYPE", "weight_zero_point", "int32", str(zp.dtype)))
        want_zp = (dense_words(out, bits), groups)
        if zp.shape != want_zp:
            found.append(Violation("CT-SHAPE", "weight_zero_point", f"{want_zp} = [ceil(out*b/32), G]", _shape(zp)))
    if "weight_shape" in tensors:
        ws = np.asarray(tensors["weight_shape"])
        if ws.shape != (2,) or ws.dtype.kind not in "iu" or [int(v) for v in ws] != [out, in_]:
            found.append(Violation("CT-WEIGHT-SHAPE", "weight_shape", f"[{out}, {in_}]", str(ws.tolist())))
    if "weight_g_idx" in tensors:
        g_idx = np.asarray(tensors["weight_g_idx"])
        if g_idx.dtype.kind not in "iu":
            found.append(Violation("CT-DTYPE", "weight_g_idx", "an integer dtype", str(g_idx.dtype)))
        elif g_idx.shape != (in_,):
            found.append(Violation("CT-SHAPE", "weight_g_idx", f"({in_},)", _shape(g_idx)))
        elif g_idx.size and (int(g_idx.min()) < 0 or int(g_idx.max()) >= groups):
            span = f"[{int(g_idx.min())}, {int(g_idx.max())}]"
            found.append(Violation("CT-GIDX-RANGE", "weight_g_idx", f"values in [0, {groups})", span))
    return found
