"""Small validation helpers that layouts use to report :class:`~qformats.violations.Violation` findings.

Each helper appends findings to a list instead of raising, so :meth:`validate` can report every broken
rule at once; :func:`raise_on_violations` turns a non-empty list into one :class:`LayoutError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .errors import LayoutError, UnsupportedLayoutError
from .logical import QuantizedWeight
from .violations import Violation

# dtype names shared by the layouts' checks: packed 32-bit words, and the scale dtypes they keep.
INT32_WORDS: tuple[str, ...] = ("int32",)
SCALE_DTYPES: tuple[str, ...] = ("float16", "float32", "bfloat16")


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


def check_tensors(
    tensors: Mapping[str, np.ndarray],
    specs: Mapping[str, tuple[Sequence[str], tuple[int, ...]]],
    prefix: str,
    found: list[Violation],
) -> bool:
    """Check presence, then dtype, then shape of every ``name -> (allowed dtypes, shape)`` in ``specs``.

    Records ``<prefix>-MISSING`` / ``-DTYPE-<NAME>`` / ``-SHAPE-<NAME>`` findings (dtype and shape checks
    only when every tensor is present); True when nothing was recorded.
    """
    if not require_tensors(tensors, tuple(specs), prefix, found):
        return False
    before = len(found)
    for name, (dtypes, _) in specs.items():
        check_dtype(tensors, name, dtypes, prefix, found)
    for name, (_, shape) in specs.items():
        check_shape(tensors, name, shape, prefix, found)
    return len(found) == before


def require_packable(
    title: str,
    pack_dtype: str,
    word_dtype: str,
    weight: QuantizedWeight,
    cannot_represent: Callable[[QuantizedWeight], str | None],
) -> None:
    """Raise :class:`UnsupportedLayoutError` unless ``pack_dtype`` is the layout's word dtype and the
    layout can hold ``weight`` (``cannot_represent`` gives the reason it cannot)."""
    if pack_dtype != word_dtype:
        raise UnsupportedLayoutError(f"{title} packs {word_dtype} words only; pack_dtype={pack_dtype!r}")
    reason = cannot_represent(weight)
    if reason is not None:
        raise UnsupportedLayoutError(reason)
