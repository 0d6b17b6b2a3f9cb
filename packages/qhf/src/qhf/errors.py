"""The qhf exception hierarchy.

One root, :class:`QHFError`; every leaf also subclasses the builtin that fits, so callers that catch
``ValueError`` or ``FileNotFoundError`` keep working.
"""

from __future__ import annotations


class QHFError(Exception):
    """Root of every error raised by qhf."""


class UnsupportedArchitectureError(QHFError, ValueError):
    """``config.model_type`` has no model definition; the message lists the supported types."""


class MissingFileError(QHFError, FileNotFoundError):
    """A file a source or checkpoint directory needs is absent (names the directory and the file)."""


class SourceFormatError(QHFError, ValueError):
    """A source file exists but is unusable: unreadable config, refused pickle weights, missing tensors."""


class TokenizerError(QHFError, ValueError):
    """The tokenizer cannot do what the run needs (load, pad, or encode the calibration text)."""


class CalibrationError(QHFError, ValueError):
    """The calibration or evaluation data is empty or unusable (says how much was dropped and why)."""


class VerificationError(QHFError, RuntimeError):
    """Verify-after-save found a difference between the saved checkpoint and the in-memory model."""


class StateError(QHFError, RuntimeError):
    """An API call came in the wrong order (e.g. ``save`` before ``quantize``)."""


class InsufficientResourcesError(QHFError, MemoryError):
    """A run the machine cannot hold (estimated RAM or output disk above what is available), refused before any
    work; the message states the estimate and what is available."""


class RotationError(QHFError, ValueError):
    """A rotation the config asked for explicitly cannot be folded into this architecture's weights (names the
    rotation, the layer structure and why), refused before any work."""


class BitsBudgetError(QHFError, ValueError):
    """A ``bits_budget`` the run cannot meet (below the cheapest or above the widest choice of widths, or exceeded
    by the config's own ``dynamic`` rules), refused before any work; the message gives the achievable range."""
