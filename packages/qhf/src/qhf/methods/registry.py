"""The method registry: name -> :class:`~qhf.methods.QuantMethod`; built-ins first, then third-party methods.

A third-party method is found through the ``lowbit.methods`` entry-point group (:data:`ENTRY_POINT_GROUP`,
read with ``importlib.metadata``): each entry point's name is the method's name and its object a
:class:`QuantMethod` subclass or instance, e.g. in the plugin's ``pyproject.toml``::

    [project.entry-points."lowbit.methods"]
    rtn_clip = "lowbit_rtn_clip:RTNClipMethod"

Entry points are loaded once, on the first lookup (:func:`discover_methods` loads them again after the
environment changed). A plugin that fails to load, or whose object is not a method of the entry point's name, is
refused naming the entry point and its distribution, never skipped. :func:`register_method` registers one in code.
"""

from __future__ import annotations

import importlib.metadata
import threading

from ..errors import QHFError
from .method import QuantMethod

#: The entry-point group third-party methods register under.
ENTRY_POINT_GROUP = "lowbit.methods"


class MethodError(QHFError, ValueError):
    """An unknown method name, a duplicate registration or a plugin that cannot be loaded (names it)."""


_REGISTRY: dict[str, QuantMethod] = {}
_LOCK = threading.RLock()
_discovered = False


def _builtins() -> None:
    from .builtin import builtin_methods

    for method in builtin_methods():
        _REGISTRY[method.name] = method


def register_method(method: QuantMethod, *, replace: bool = False) -> QuantMethod:
    """Register ``method`` under its ``name``; a taken name (a built-in's included) is refused unless ``replace``."""
    if not isinstance(method, QuantMethod):
        raise MethodError(f"register_method: expected a QuantMethod, found {method!r}")
    if not method.name or not isinstance(method.name, str):
        raise MethodError(f"register_method: a method needs a non-empty name, found {method.name!r} ({method!r})")
    with _LOCK:
        _ensure_builtins()
        if method.name in _REGISTRY and not replace:
            raise MethodError(f"method: {method.name!r} is already registered; pass replace=True to override it")
        _REGISTRY[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove the method ``name`` (a test's or a plugin's cleanup); a built-in cannot be removed."""
    with _LOCK:
        method = _REGISTRY.get(name)
        if method is None:
            raise MethodError(f"method: {name!r} is not registered")
        if method.builtin:
            raise MethodError(f"method: {name!r} is built in; it cannot be unregistered")
        del _REGISTRY[name]


def _ensure_builtins() -> None:
    if not _REGISTRY:
        _builtins()


def _load_entry_point(entry: importlib.metadata.EntryPoint) -> QuantMethod:
    where = f"entry point {entry.name!r} = {entry.value!r} ({ENTRY_POINT_GROUP}"
    dist = getattr(entry, "dist", None)
    where += f", distribution {dist.name!r})" if dist is not None else ")"
    try:
        loaded = entry.load()
    except Exception as exc:  # a plugin's import error is the user's to read, with the plugin named
        raise MethodError(f"{where}: cannot be loaded: {type(exc).__name__}: {exc}") from exc
    method = loaded() if isinstance(loaded, type) and issubclass(loaded, QuantMethod) else loaded
    if not isinstance(method, QuantMethod):
        raise MethodError(f"{where}: expected a QuantMethod subclass or instance, found {loaded!r}")
    if method.name != entry.name:
        raise MethodError(f"{where}: the method's name is {method.name!r}; the entry point must be named the same")
    return method


def discover_methods() -> tuple[str, ...]:
    """Load the ``lowbit.methods`` entry points (again) and register their methods; returns the names found.
    An entry point whose name is a built-in's is refused; a third-party name registered before (by an earlier
    discovery or :func:`register_method`) is replaced by the entry point's method, so a second discovery picks up a
    changed environment."""
    global _discovered
    with _LOCK:
        _ensure_builtins()
        found = []
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            known = _REGISTRY.get(entry.name)
            if known is not None and known.builtin:
                raise MethodError(
                    f"entry point {entry.name!r} ({ENTRY_POINT_GROUP}): {entry.name!r} is a built-in method"
                )
            _REGISTRY[entry.name] = _load_entry_point(entry)
            found.append(entry.name)
        _discovered = True
        return tuple(found)


def _ready() -> None:
    with _LOCK:
        _ensure_builtins()
        if not _discovered:
            discover_methods()


def find_method(name: object) -> QuantMethod | None:
    """The method registered as ``name``, else None (entry points are loaded on the first call)."""
    if not isinstance(name, str):
        return None
    _ready()
    return _REGISTRY.get(name)


def get_method(name: str) -> QuantMethod:
    """The method registered as ``name``; an unknown name raises :class:`MethodError` listing the known ones."""
    method = find_method(name)
    if method is None:
        raise MethodError(f"method: expected one of {', '.join(method_names())}, found {name!r}")
    return method


def method_names() -> tuple[str, ...]:
    """Every registered method's name: the built-ins in qformats' table order, then the others."""
    _ready()
    return tuple(_REGISTRY)


def cli_method(flag: str) -> QuantMethod | None:
    """The method whose ``--method`` value is ``flag`` (``nf4``: bitsandbytes), else None."""
    _ready()
    for method in _REGISTRY.values():
        if method.flag_name == flag:
            return method
    return None


def cli_names() -> tuple[str, ...]:
    """The ``lowbit quantize --method`` values, in :func:`method_names` order."""
    _ready()
    return tuple(method.flag_name for method in _REGISTRY.values())
