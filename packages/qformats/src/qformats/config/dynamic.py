"""Dynamic per-module rules: ``pattern -> override`` with first-match-wins semantics.

A pattern prefixed ``-:`` is *negative*: matching modules are not quantized (kept dense). A pattern
prefixed ``+:`` or unprefixed is *positive*: its override dict (``bits``, ``group_size``, ``sym``,
``desc_act`` ...) replaces the base values for matching modules. The remainder is a regular
expression matched from the **start** of the full dotted module name (``re.match``, like the
reference), e.g. ``model.layers.3.mlp.down_proj``. Lookups try every negative rule before any
positive one, then the first match wins in file order. The rules are written back in the order
they were read, so a round trip never reorders first-match rules. Patterns are compiled through
:mod:`~qformats.config.pattern_guard`, which refuses those that could backtrack catastrophically.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .pattern_guard import checked_name, compile_rule_pattern

NEGATIVE_PREFIX = "-:"
POSITIVE_PREFIX = "+:"

# Override keys whose value type we check; other keys are carried verbatim.
_INT_KEYS = ("bits", "group_size")
_BOOL_KEYS = ("sym", "desc_act", "static_groups", "act_group_aware")


@dataclass(frozen=True)
class DynamicRule:
    """One rule as written (``key``), its polarity, compiled regex and override values."""

    key: str
    negative: bool
    regex: re.Pattern[str]
    override: Mapping[str, Any] = field(default_factory=dict)

    def matches(self, module: str) -> bool:
        return self.regex.match(checked_name(module)) is not None


def _rule(key: object, value: object) -> DynamicRule:
    if not isinstance(key, str) or not key:
        raise ConfigError(f"dynamic: expected non-empty string patterns, found {key!r}")
    negative = key.startswith(NEGATIVE_PREFIX)
    pattern = key[2:] if negative or key.startswith(POSITIVE_PREFIX) else key
    regex = compile_rule_pattern(key, pattern)
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"dynamic[{key!r}]: expected an override object, found {type(value).__name__}")
    for name in _INT_KEYS:
        if name in value and (isinstance(value[name], bool) or not isinstance(value[name], int)):
            raise ConfigError(f"dynamic[{key!r}].{name}: expected an integer, found {value[name]!r}")
    for name in _BOOL_KEYS:
        if name in value and not isinstance(value[name], bool):
            raise ConfigError(f"dynamic[{key!r}].{name}: expected true or false, found {value[name]!r}")
    if "bits" in value and not 1 <= value["bits"] <= 8:
        raise ConfigError(f"dynamic[{key!r}].bits: expected 1..8, found {value['bits']}")
    if "group_size" in value and value["group_size"] != -1 and value["group_size"] <= 0:
        raise ConfigError(
            f"dynamic[{key!r}].group_size: expected -1 or a positive integer, found {value['group_size']}"
        )
    return DynamicRule(key, negative, regex, dict(value))


class DynamicRules:
    """An ordered, immutable set of dynamic rules (build with :meth:`from_mapping`)."""

    def __init__(self, rules: tuple[DynamicRule, ...]) -> None:
        self._rules = rules
        # Evaluation order: negatives first, then positives, each in file order.
        self._lookup = tuple(r for r in rules if r.negative) + tuple(r for r in rules if not r.negative)

    @classmethod
    def from_mapping(cls, value: object) -> DynamicRules:
        """Parse the ``dynamic`` config value; :class:`ConfigError` names a bad pattern or field."""
        if not isinstance(value, Mapping):
            raise ConfigError(f"dynamic: expected an object of pattern -> override, found {type(value).__name__}")
        return cls(tuple(_rule(k, v) for k, v in value.items()))

    def __iter__(self) -> Iterator[DynamicRule]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DynamicRules) and self.to_mapping() == other.to_mapping()

    def __hash__(self) -> int:
        return hash(tuple(r.key for r in self._rules))

    def __repr__(self) -> str:
        return f"DynamicRules({[r.key for r in self._rules]!r})"

    def match(self, module: str) -> DynamicRule | None:
        """The rule that decides ``module`` (negatives first, then first positive match), or None."""
        for rule in self._lookup:
            if rule.matches(module):
                return rule
        return None

    def excluded(self, module: str) -> bool:
        """True when a negative rule keeps ``module`` dense."""
        rule = self.match(module)
        return rule is not None and rule.negative

    def override(self, module: str) -> Mapping[str, Any]:
        """The positive override for ``module`` ({} when none; a negative match also gives {})."""
        rule = self.match(module)
        return {} if rule is None or rule.negative else rule.override

    def positive_bits(self) -> tuple[int, ...]:
        """Every ``bits`` value of a positive rule (used for 5/6/7-bit planar routing)."""
        return tuple(int(r.override["bits"]) for r in self._rules if not r.negative and "bits" in r.override)

    def to_mapping(self) -> dict[str, dict[str, Any]]:
        """The rules as written, in their original order (``adapter`` entries are kept)."""
        return {r.key: dict(r.override) for r in self._rules}
