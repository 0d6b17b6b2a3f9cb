"""Rules shared by the AWQ layouts: what they can represent and the zero-point checks (AWQ-005).

All AWQ layouts store the **true** zero point that dequantization subtracts (spec rule AWQ-005: never
``zero - 1``), have no ``g_idx`` tensor (so only the natural ``i // group_size`` group map), and need
``in_features`` divisible by ``group_size``.
"""

from __future__ import annotations

import numpy as np

from ...layout_checks import SCALE_DTYPES
from ...logical import QuantizedWeight, group_count
from ...violations import Violation

__all__ = ["SCALE_DTYPES", "awq_group_count", "awq_representability", "symmetric_zero_violations"]


def awq_representability(weight: QuantizedWeight, layout: str, bits_allowed: tuple[int, ...]) -> str | None:
    """The reason ``layout`` cannot hold ``weight`` (bits, act-order, partial group), or ``None``."""
    if weight.bits not in bits_allowed:
        allowed = ", ".join(str(b) for b in bits_allowed)
        return f"{layout} stores {allowed}-bit codes only; the weight is {weight.bits}-bit"
    if not weight.has_default_g_idx():
        return (
            f"{layout} has no g_idx tensor, so it cannot hold an act-order (permuted) group map; "
            "the weight's g_idx is not i // group_size"
        )
    if weight.group_size != -1 and weight.in_features % weight.group_size:
        return (
            f"{layout} needs in_features divisible by group_size (no partial last group); "
            f"in_features={weight.in_features}, group_size={weight.group_size}"
        )
    return None


def awq_group_count(in_features: int, group_size: int) -> int:
    """Groups along the input axis for an AWQ layout (``in_features // group_size``, or 1 for ``-1``)."""
    return group_count(in_features, group_size)


def symmetric_zero_violations(zeros: np.ndarray, bits: int, tensor: str) -> list[Violation]:
    """For a symmetric config: every zero must be ``2**(bits-1)``; all ``2**(bits-1) - 1`` breaks AWQ-005."""
    mid = 1 << (bits - 1)
    if zeros.size == 0 or bool(np.all(zeros == mid)):
        return []
    if bool(np.all(zeros == mid - 1)):
        return [
            Violation(
                "AWQ-005",
                tensor,
                f"true zero points ({mid} for symmetric {bits}-bit; AWQ stores the zero that dequant subtracts)",
                f"every zero is {mid - 1}: the writer stored zero - 1 (GPTQ v1 habit); do not add 1 to zeros",
            )
        ]
    values = np.unique(zeros)
    shown = ", ".join(str(int(v)) for v in values[:8])
    return [Violation("AWQ-SYM-ZERO", tensor, f"every zero == {mid} for a symmetric config", f"zeros {{{shown}}}")]
