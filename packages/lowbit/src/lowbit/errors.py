"""The exception root of the ``lowbit`` command line.

Every error the CLI itself raises is a :class:`LowbitError`; the leaves also subclass the fitting builtin.
Errors of the packages below (``QHFError``, ``QFormatsError`` ...) pass through unchanged and are
reported by :func:`lowbit.cli.main.main` with the command that raised them.
"""

from __future__ import annotations


class LowbitError(Exception):
    """Root of every error raised by the ``lowbit`` command line."""


class UsageError(LowbitError, ValueError):
    """A command-line argument is invalid or contradicts another (names the flag, expected vs found)."""


class MissingExtraError(LowbitError, ImportError):
    """An optional dependency is not installed (names the package and the pip command that adds it)."""


class UnsupportedRequestError(LowbitError, ValueError):
    """The request is well formed but no installed package provides it (says what is available)."""


class LossyConversionError(LowbitError, ValueError):
    """A conversion would change values; lists what would be lost per module (pass --allow-lossy to accept)."""


class NonFiniteResultError(LowbitError, ArithmeticError):
    """A measurement came out NaN or infinite (names the model and the quantity; the command fails)."""
