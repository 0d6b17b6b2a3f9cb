"""Padded group width of the AWQ GEMV family (``gemv``, ``gemv_fast``, ``llm-awq``).

These layouts store scales and zeros for ``zeros_width(in, gs) * 8`` groups, padding past the real
``in // gs`` groups with zeros: ``zeros_width = ceil(ceil(G / 8) / m) * m`` with ``m`` = 1 for
``gs >= 128``, 2 for 64, 4 for 32, 8 for 16. Other group sizes (and ``-1``) have no defined width.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...errors import UnsupportedLayoutError
from ...violations import Violation

_MULTIPLIER = {64: 2, 32: 4, 16: 8}


def width_multiplier(group_size: int) -> int | None:
    """The padding multiplier ``m`` for ``group_size``, or ``None`` when the GEMV family cannot use it."""
    if group_size >= 128:
        return 1
    return _MULTIPLIER.get(group_size)


def zeros_width(in_features: int, group_size: int) -> int:
    """Number of int32 zero words per output row (each holding 8 groups); raises for unusable group sizes."""
    mult = width_multiplier(group_size)
    if mult is None:
        raise UnsupportedLayoutError(
            f"AWQ GEMV layouts define a zero/scale width only for group_size 16, 32, 64 or >= 128; found {group_size}"
        )
    groups = in_features // group_size
    base = -(-groups // 8)
    return -(-base // mult) * mult


def group_size_reason(layout: str, group_size: int) -> str | None:
    """Why ``layout`` cannot use ``group_size`` (``None`` when it can)."""
    if group_size == -1 or width_multiplier(group_size) is None:
        return (
            f"{layout} needs group_size 16, 32, 64 or >= 128 (its padded zero width is defined only then); "
            f"found {group_size}"
        )
    return None


def padding_violations(rule: str, arrays: Mapping[str, np.ndarray], groups: int) -> list[Violation]:
    """``<rule>-PAD`` for every group-major array (``[padded groups, ...]``) with non-zero entries past ``groups``."""
    return [
        Violation(f"{rule}-PAD", name, f"zero padding past group {groups}", "non-zero padding")
        for name, arr in arrays.items()
        if bool(np.any(arr[groups:]))
    ]
