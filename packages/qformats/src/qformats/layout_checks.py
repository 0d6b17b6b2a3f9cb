"""Small validation helpers that layouts use to report :class:`~qformats.violations.Violation` findings.

Each helper appends findings to a list instead of raising, so :meth:`validate` can report every broken
rule at once; :func:`raise_on_violations` turns a non-empty list into one :class:`LayoutError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .errors import LayoutError
from .violations import Violation


def require_tensors(
    tensors: Mapping[str, np.ndarray], names: Sequence[str], prefix: str, found: list[Violation]
) -> bool:
    """Record a ``<prefix>-MISSING`` violation for every absent name; True when all are present."""
    ok = True
    for name in names:
        if name not in tensors:
            found.append(Violation(f"{prefix}-MISSING", name, "tensor present", "absent"))
            ok = False
    return ok


def check_shape(
    tensors: Mapping[str, np.ndarray], name: str, expected: tuple[int, ...], prefix: str, found: list[Violation]
) -> bool:
    """Record ``<prefix>-SHAPE-<NAME>`` when ``tensors[name]`` does not have shape ``expected``."""
    shape = tuple(int(d) for d in np.shape(tensors[name]))
    if shape != expected:
        found.append(Violation(f"{prefix}-SHAPE-{name.upper()}", name, f"shape {expected}", f"shape {shape}"))
        return False
    return True


def check_dtype(
    tensors: Mapping[str, np.ndarray], name: str, allowed: Sequence[str], prefix: str, found: list[Violation]
) -> bool:
    """Record ``<prefix>-DTYPE-<NAME>`` when the dtype name of ``tensors[name]`` is not in ``allowed``."""
    dtype = str(np.asarray(tensors[name]).dtype)
    if dtype not in allowed:
        found.append(Violation(f"{prefix}-DTYPE-{name.upper()}", name, " or ".join(allowed), dtype))
        return False
    return True


def raise_on_violations(layout: str, violations: Sequence[Violation]) -> None:
    """Raise one :class:`LayoutError` listing every violation (rule ids included); no-op when empty."""
    if violations:
        lines = "; ".join(str(v) for v in violations)
        raise LayoutError(f"{layout}: tensors break the layout rules: {lines}")


def require_dims(layout: str, tensors: Mapping[str, np.ndarray], names: Sequence[str]) -> None:
    """Raise :class:`LayoutError` unless every named tensor is present and 2-D (used to infer dims)."""
    for name in names:
        if name not in tensors:
            raise LayoutError(f"{layout}: cannot infer dimensions without the {name!r} tensor")
        if np.ndim(tensors[name]) != 2:
            raise LayoutError(f"{layout}: {name!r} must be 2-D, found shape {np.shape(tensors[name])}")
