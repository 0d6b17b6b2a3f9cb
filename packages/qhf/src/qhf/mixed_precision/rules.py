"""Chosen widths as the config's ``dynamic`` rules: ``"+:<pattern>": {"bits": b}`` for every unit whose width
differs from the config's ``bits`` (the base), in unit order.

Readers match a rule's pattern with ``re.match`` against a module's full name: qformats, GPT-QModel and vLLM,
which asks for its *fused* modules (``model.layers.3.self_attn.qkv_proj``, ``...mlp.gate_up_proj``,
``...mlp.experts``). A unit's pattern therefore names the members' common parent and excludes the parent's other
quantized modules rather than listing the members, so it also matches the fused name:

* one module: the exact name, ``model\\.layers\\.3\\.self_attn\\.o_proj$``;
* several: the parent, then either the end or a child that is none of the parent's other quantized modules,
  ``model\\.layers\\.3\\.self_attn(?:$|\\.(?!(?:o_proj)$))``;
* when that pattern is refused by qformats' pattern guard (too many alternatives), one exact rule per member.

:func:`dynamic_rules` checks the result: every module of every unit reads back its chosen width through
``QuantizeConfig.for_module``, or it raises naming the module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from qformats.config import QuantizeConfig
from qformats.config.dynamic import POSITIVE_PREFIX, DynamicRules
from qformats.errors import ConfigError

from ..errors import QHFError
from .units import Unit


def _parent(names: Sequence[str]) -> str:
    """The longest dotted prefix (whole components) every name lies under."""
    parts = [name.split(".") for name in names]
    common: list[str] = []
    for column in zip(*(p[:-1] for p in parts), strict=False):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    return ".".join(common)


def unit_patterns(unit: Unit, layer_modules: Sequence[str]) -> list[str]:
    """The rule patterns (without the ``+:`` prefix) matching exactly ``unit``'s modules among ``layer_modules``
    (every quantized module of its layer), and the names engines fuse them under (module docstring)."""
    names = [m.name for m in unit.members]
    if len(names) == 1:
        return [re.escape(names[0]) + "$"]
    parent = _parent(names)
    inside = set(names)
    siblings = [m[len(parent) + 1 :] for m in layer_modules if m.startswith(parent + ".") and m not in inside]
    if parent:
        tail = r"(?:$|\.)" if not siblings else r"(?:$|\.(?!(?:" + "|".join(map(re.escape, siblings)) + r")$))"
        pattern = re.escape(parent) + tail
        try:
            DynamicRules.from_mapping({POSITIVE_PREFIX + pattern: {}})
            return [pattern]
        except ConfigError:
            pass  # more alternatives than the pattern guard allows: exact names below
    return [re.escape(name) + "$" for name in names]


def dynamic_rules(units: Sequence[Unit], chosen: Mapping[str, int], base_bits: int) -> dict[str, dict[str, Any]]:
    """``{"+:<pattern>": {"bits": b}}`` for the units whose chosen width (``chosen``: unit key -> bits) is not
    ``base_bits``, in unit order."""
    by_layer: dict[int, list[str]] = {}
    for unit in units:
        by_layer.setdefault(unit.layer, []).extend(m.name for m in unit.members)
    rules: dict[str, dict[str, Any]] = {}
    for unit in units:
        bits = chosen[unit.key]
        if bits != base_bits:
            for pattern in unit_patterns(unit, by_layer[unit.layer]):
                rules[POSITIVE_PREFIX + pattern] = {"bits": bits}
    return rules


def check_rules(config: QuantizeConfig, units: Sequence[Unit], chosen: Mapping[str, int]) -> None:
    """Raise :class:`~qhf.errors.QHFError` naming the first module whose width under ``config``'s rules is not
    the one chosen for its unit."""
    for unit in units:
        for member in unit.members:
            spec = config.for_module(member.name)
            got = None if spec is None else spec.bits
            if got != chosen[unit.key]:
                raise QHFError(
                    f"mixed precision: the dynamic rules give {member.name} {got} bits, its unit was allocated "
                    f"{chosen[unit.key]}"
                )
