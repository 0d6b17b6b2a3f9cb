"""Representability rules shared by the Marlin layouts (kernel contract: 4/8-bit, tile-aligned shapes)."""

from __future__ import annotations

import numpy as np

from ...logical import QuantizedWeight, default_g_idx
from ...violations import Violation
from ._tiles import TILE

MARLIN_BITS = (4, 8)
MARLIN_GROUP_SIZES = (-1, 32, 64, 128)
MIN_N = 64


def shape_reason(title: str, bits: int, group_size: int, k: int, n: int) -> str | None:
    """Why ``title`` cannot hold a ``bits``-bit ``[N, K]`` weight with ``group_size`` (``None`` if it can)."""
    if bits not in MARLIN_BITS:
        return f"{title} stores 4- or 8-bit codes only; the weight is {bits}-bit"
    if group_size not in MARLIN_GROUP_SIZES and group_size != k:
        return f"{title} supports group_size -1, 32, 64, 128 (or in_features); found {group_size}"
    if k % TILE or n % MIN_N:
        return f"{title} tiles need in_features % 16 == 0 and out_features % 64 == 0; found in={k}, out={n}"
    if group_size != -1 and k % group_size:
        return f"{title} needs in_features divisible by group_size (no partial last group); in={k}, group={group_size}"
    return None


def act_order_reason(title: str, weight: QuantizedWeight) -> str | None:
    """Marlin sorts rows by g_idx; that only works when every group holds exactly ``group_size`` columns."""
    if weight.has_default_g_idx():
        return None
    sorted_idx = np.sort(weight.g_idx, kind="stable")
    if not np.array_equal(sorted_idx, default_g_idx(weight.in_features, weight.group_size)):
        return f"{title} act-order needs every group to hold exactly group_size columns of g_idx"
    return None


def dims_violation(rule: str, reason: str | None) -> list[Violation]:
    """A one-element violation list for a config/shape reason (empty when ``reason`` is ``None``)."""
    return [] if reason is None else [Violation(f"{rule}-DIMS", "config", "a Marlin-compatible shape", reason)]
