"""The qcheckpoint exception hierarchy.

One root, :class:`CheckpointError`; every leaf also subclasses the builtin that fits, so callers that catch
``ValueError`` or ``RuntimeError`` keep working. Messages name the file, object, field or tree path involved,
what was expected and what was found.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Root of every error raised by qcheckpoint."""


class CheckpointConfigError(CheckpointError, ValueError):
    """A :class:`~qcheckpoint.config.CheckpointConfig` field is invalid (names the field)."""


class CheckpointCorrupt(CheckpointError, ValueError):
    """A stored file (object, manifest, CURRENT) is missing, malformed or fails its hash check."""


class IdentityMismatchError(CheckpointError, ValueError):
    """The stored identity differs from the current run's; ``fields`` names the differing top-level keys."""

    def __init__(self, message: str, fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.fields = fields


class CommitError(CheckpointError, ValueError):
    """A commit was refused before anything was published (bad cursor, identity change, unknown object)."""


class ContinuationError(CheckpointError, ValueError):
    """A value tree cannot be encoded, or a continuation blob cannot be decoded (names the tree path)."""


class CheckpointLeaseError(CheckpointError, RuntimeError):
    """The writer lease is held by someone else, or an operation ran without holding it."""


class ResumePolicyError(CheckpointError, RuntimeError):
    """The resume policy forbids what the directory holds (``never`` with a checkpoint, ``required`` without)."""


class CheckpointStopped(CheckpointError):
    """Raised by callers after a cooperative stop was honoured at a committed boundary."""
