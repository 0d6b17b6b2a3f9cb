"""A method's settings as a closed, typed object: a frozen dataclass built from a config's keys.

:func:`closed_settings` is the one constructor: a key the class does not declare is refused naming the key, the
method and the keys it accepts (as compressed-tensors' ``extra="forbid"`` models are); a value whose type does not
match the field's default (``int``, ``float``, ``bool``, ``str``) is refused naming the field; an ``int`` given for
a ``float`` field is taken as that float. Fields without a default are required. The class's own
``__post_init__`` may check ranges (raise ``ValueError`` naming the field; it is reported as a config error).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from ..errors import QHFError

T = TypeVar("T")


class MethodSettingsError(QHFError, ValueError):
    """A method's settings are malformed: an unknown key, a wrong type, a value out of range (names the key)."""


def setting_names(settings_type: type) -> tuple[str, ...]:
    """The keys ``settings_type`` (a dataclass) accepts, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(settings_type))


def _checked(method: str, field: dataclasses.Field[Any], value: Any) -> Any:
    default = field.default
    if default is dataclasses.MISSING or default is None:
        return value
    expected = type(default)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is int and isinstance(value, bool):
        raise MethodSettingsError(f"{field.name}: method {method!r} expects an integer, found {value!r}")
    if expected in (int, float, bool, str) and not isinstance(value, expected):
        raise MethodSettingsError(f"{field.name}: method {method!r} expects a {expected.__name__}, found {value!r}")
    return value


def closed_settings(settings_type: type[T], values: Mapping[str, Any], *, method: str) -> T:
    """``settings_type(**values)`` for the method named ``method``, refusing keys it does not declare (module
    docstring). Raises :class:`MethodSettingsError` naming the key and the accepted ones."""
    if not dataclasses.is_dataclass(settings_type):
        raise MethodSettingsError(f"method {method!r}: its settings type {settings_type!r} is not a dataclass")
    fields = {f.name: f for f in dataclasses.fields(settings_type)}
    unknown = [key for key in values if key not in fields]
    if unknown:
        accepted = ", ".join(fields) or "none"
        raise MethodSettingsError(
            f"{unknown[0]}: not a setting of method {method!r} (it accepts: {accepted})"
            + (f"; also unknown: {', '.join(unknown[1:])}" if len(unknown) > 1 else "")
        )
    missing = [
        name
        for name, f in fields.items()
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise MethodSettingsError(f"{missing[0]}: a required setting of method {method!r}, not given")
    checked = {key: _checked(method, fields[key], value) for key, value in values.items()}
    try:
        return settings_type(**checked)
    except (TypeError, ValueError) as exc:
        raise MethodSettingsError(f"method {method!r}: {exc}") from None


def settings_dict(settings: Any) -> dict[str, Any]:
    """The fields of a settings object as a plain dict (declaration order; values as held)."""
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
