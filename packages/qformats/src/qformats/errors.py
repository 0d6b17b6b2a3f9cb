"""The qformats exception hierarchy.

One root, :class:`QFormatsError`; every leaf also subclasses the builtin that fits, so callers
that catch ``ValueError`` or ``KeyError`` keep working.
"""

from __future__ import annotations


class QFormatsError(Exception):
    """Root of every error raised by qformats."""


class ConfigError(QFormatsError, ValueError):
    """A quantization config is malformed, contradictory or unsupported (names the field)."""


class LayoutError(QFormatsError, ValueError):
    """Tensors do not follow the layout they claim (names the tensor, expected and found)."""


class UnsupportedLayoutError(QFormatsError, ValueError):
    """No layout is registered under a key, or a layout cannot represent a weight."""


class DuplicateRegistrationError(QFormatsError, KeyError):
    """A layout key was registered twice."""


class TranscodeError(QFormatsError, ValueError):
    """A lossless transcode between two layouts is impossible; the message says exactly why."""


class CheckpointFormatError(QFormatsError, ValueError):
    """A checkpoint file or directory is unreadable, corrupt or refused (names the file)."""


class UnsafeFileError(CheckpointFormatError, ConfigError):
    """A file a reader was pointed at is not a regular file, or resolves outside its directory (refused
    before it is opened); a :class:`CheckpointFormatError` and a :class:`ConfigError`, so both kinds of
    reader report it by name."""
