"""Errors of the native .gguf container reader and writer."""

from __future__ import annotations

from ..errors import CheckpointFormatError


class GGUFFileError(CheckpointFormatError):
    """A .gguf file is malformed, truncated or lies about its sizes (the message names the file,
    the field or tensor, and what was expected vs found)."""
