"""The backend registry: backend name -> quantized linear module class.

Built-in backends are imported on first lookup (no import-time side effects); third-party backends call
:func:`register_backend` with a :class:`~qkernels.module.QuantLinear` subclass.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING

from .errors import DuplicateBackendError, UnknownBackendError

if TYPE_CHECKING:
    from .module import QuantLinear

AUTO = "auto"

BUILTIN_BACKEND_MODULES: tuple[str, ...] = (
    "qkernels.backends.torch_reference",
    "qkernels.backends.aten_int4",
    "qkernels.backends.cpu_int4",
    "qkernels.backends.triton_int4",
)

_BACKENDS: dict[str, type[QuantLinear]] = {}
_builtins_loaded = False
_lock = threading.RLock()  # finalizer worker threads may look backends up concurrently


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    with _lock:
        if _builtins_loaded:
            return
        for name in BUILTIN_BACKEND_MODULES:
            importlib.import_module(name)
        _builtins_loaded = True


def register_backend(cls: type[QuantLinear]) -> type[QuantLinear]:
    """Register a module class under ``cls.NAME``; usable as a class decorator. Duplicates raise."""
    name = str(cls.NAME)
    with _lock:
        return _register(name, cls)


def _register(name: str, cls: type[QuantLinear]) -> type[QuantLinear]:
    if name == AUTO:
        raise DuplicateBackendError(f"backend name {AUTO!r} is reserved for automatic selection")
    if name in _BACKENDS:
        raise DuplicateBackendError(f"backend {name!r} is already registered ({_BACKENDS[name].__qualname__})")
    _BACKENDS[name] = cls
    return cls


def get_backend(name: str) -> type[QuantLinear]:
    """The module class registered under ``name``."""
    _load_builtins()
    try:
        return _BACKENDS[str(name)]
    except KeyError:
        raise UnknownBackendError(
            f"no backend registered as {name!r}; known: {', '.join(registered_backends())}"
        ) from None


def registered_backends() -> tuple[str, ...]:
    """Every registered backend name, in AUTO order: priority descending, then name."""
    _load_builtins()
    return tuple(sorted(_BACKENDS, key=lambda n: (-_BACKENDS[n].CAPS.priority, n)))
