"""``lowbit quantize``'s method flags: declared by the methods (``QuantMethod.cli_flags``, qhf's registry), added
to the parser when ``quantize`` parses or prints its help, and refused for a method that does not take them.

One flag string has one declaration across the registry: two methods declaring ``--x`` differently (or a method
declaring a common flag such as ``--bits``) is a ``MethodError`` naming the flag and both declarers. A flag the
chosen method does not list is a ``UsageError`` naming the flag and the method: a built-in calibrated method says
what the flag is and which methods take it (``--awq-scales: a GPTQ variant of its own; not with --method awq
(taken by --method gptq)``), a weight-only method refuses
the groups / zero points / calibration flags together, a third-party method lists the settings it takes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import UsageError


def registered_flags() -> tuple[Any, ...]:
    """Every registered method's flags (``MethodFlag``), each once, in registry order; conflicting declarations
    raise ``qhf.methods.MethodError``."""
    from qhf.methods import MethodError, get_method, method_names

    seen: dict[str, tuple[Any, str]] = {}
    for name in method_names():
        for flag in get_method(name).cli_flags:
            known = seen.get(flag.flag)
            if known is None:
                seen[flag.flag] = (flag, name)
            elif known[0] != flag:
                raise MethodError(
                    f"{flag.flag}: method {name!r} declares it differently from method {known[1]!r} "
                    "(one flag, one declaration: reuse the other's MethodFlag or name yours differently)"
                )
    return tuple(flag for flag, _ in seen.values())


def add_method_flags(parser: argparse.ArgumentParser, value_types: Mapping[str, Callable[[str], Any]]) -> None:
    """Add :func:`registered_flags` to ``parser`` in a "method flags" group; a ``type`` given by name is one of
    ``value_types`` (the CLI's value parsers)."""
    from qhf.methods import MethodError

    group = parser.add_argument_group("method flags", "flags a --method takes (each method declares its own)")
    for flag in registered_flags():
        options = flag.options
        kind = options.get("type")
        if isinstance(kind, str):
            if kind not in value_types:
                raise MethodError(f"{flag.flag}: type {kind!r} is not one of {', '.join(value_types)}")
            options["type"] = value_types[kind]
        try:
            group.add_argument(flag.flag, **options)
        except (argparse.ArgumentError, TypeError, ValueError) as exc:
            raise MethodError(f"{flag.flag}: cannot be added to lowbit quantize: {exc}") from None


def refuse_flags_not_taken(args: argparse.Namespace, method: Any) -> None:
    """``UsageError`` for the method flags given in ``args`` that ``method`` (a ``QuantMethod``) does not take
    (module docstring)."""
    taken = {flag.flag for flag in method.cli_flags}
    refused = [flag for flag in registered_flags() if flag.flag not in taken and flag.given(args)]
    if not refused:
        return
    if not method.builtin:
        from qhf.methods import setting_names

        accepted = ", ".join(setting_names(method.settings_type)) or "none"
        raise UsageError(
            f"--method {args.method}: {', '.join(f.flag for f in refused)} not a setting of this method (its "
            f"settings, given with --setting KEY=VALUE: {accepted})"
        )
    grouped = [flag.flag for flag in refused if method.weight_only and flag.integer]
    if grouped:
        raise UsageError(
            f"--method {args.method}: {', '.join(grouped)} not used by a weight-only method "
            "(no groups, zero points or calibration)"
        )
    first = refused[0]
    from qhf.methods import get_method, method_names

    takers = [m.flag_name for m in map(get_method, method_names()) if first in m.cli_flags]
    raise UsageError(
        f"{first.shown(args)}: {first.about or 'a flag of another method'}; not with --method {args.method} "
        f"(taken by --method {', '.join(takers)})"
    )
