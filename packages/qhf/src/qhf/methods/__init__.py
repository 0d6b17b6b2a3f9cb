"""Quantization methods as objects: :class:`QuantMethod` and the registry that finds them (built-ins and
third-party methods from the ``lowbit.methods`` entry-point group). See docs/internals.md, "Add a method"."""

from __future__ import annotations

from .cli_flags import MethodFlag, method_flag
from .closed_settings import MethodSettingsError, closed_settings, setting_names, settings_dict
from .method import NoSettings, QuantMethod
from .registry import (
    ENTRY_POINT_GROUP,
    MethodError,
    cli_method,
    cli_names,
    discover_methods,
    find_method,
    get_method,
    method_names,
    register_method,
    unregister_method,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "MethodError",
    "MethodFlag",
    "MethodSettingsError",
    "NoSettings",
    "QuantMethod",
    "cli_method",
    "cli_names",
    "closed_settings",
    "discover_methods",
    "find_method",
    "get_method",
    "method_flag",
    "method_names",
    "register_method",
    "setting_names",
    "settings_dict",
    "unregister_method",
]
