"""The qkernels exception hierarchy.

One root, :class:`QKernelsError`; every leaf also subclasses the builtin that fits, so callers that
catch ``ValueError`` or ``KeyError`` keep working.
"""

from __future__ import annotations

from collections.abc import Mapping


class QKernelsError(Exception):
    """Root of every error raised by qkernels."""


class UnknownBackendError(QKernelsError, KeyError):
    """No backend is registered under the requested name."""


class DuplicateBackendError(QKernelsError, KeyError):
    """A backend name was registered twice."""


def _format_reasons(reasons: Mapping[str, tuple[str, ...]]) -> str:
    return "\n".join(f"  - {name}: {'; '.join(why)}" for name, why in reasons.items())


class UnsupportedContractError(QKernelsError, ValueError):
    """AUTO found no backend able to serve a contract; ``reasons`` maps every backend to why not."""

    def __init__(self, what: str, reasons: Mapping[str, tuple[str, ...]]) -> None:
        self.reasons = dict(reasons)
        super().__init__(f"no backend can serve {what}:\n{_format_reasons(self.reasons)}")


class BackendRefusedError(QKernelsError, ValueError):
    """An explicitly requested backend cannot serve the contract (it is never silently replaced)."""

    def __init__(self, backend: str, what: str, reasons: tuple[str, ...]) -> None:
        self.backend = backend
        self.reasons = reasons
        super().__init__(f"backend {backend!r} cannot serve {what}: {'; '.join(reasons)}")


class KernelInputError(QKernelsError, ValueError):
    """Activations or checkpoint tensors given to a module are malformed (names what and why)."""
