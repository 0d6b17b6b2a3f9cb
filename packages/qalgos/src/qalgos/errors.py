"""The qalgos exception hierarchy.

One root, :class:`QAlgosError`; every leaf also subclasses the builtin that fits, so callers that
catch ``ValueError`` or ``ArithmeticError`` keep working.
"""

from __future__ import annotations


class QAlgosError(Exception):
    """Root of every error raised by qalgos."""


class SpecError(QAlgosError, ValueError):
    """A :class:`~qalgos.spec.QuantSpec` field is out of range or contradicts another (names the field)."""


class ShapeError(QAlgosError, ValueError):
    """A tensor passed to a quantizer has the wrong shape or dtype (names the tensor, expected and found)."""


class StateError(QAlgosError, ValueError):
    """A saved accumulator state cannot be loaded (names the key, expected and found)."""


class NumericalError(QAlgosError, ArithmeticError):
    """A search or solve produced no finite candidate (names the search and what was tried)."""
