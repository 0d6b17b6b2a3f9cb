"""The ``quantization_config`` compressed-tensors writes into ``config.json``, read for ``pack-quantized``.

Shape of the object (the fields this reader uses; others are kept in ``raw``)::

    {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
     "config_groups": {"group_0": {"targets": ["Linear"], "format": "pack-quantized",
                                   "weights": {"num_bits": 4, "type": "int", "symmetric": true,
                                               "strategy": "group", "group_size": 128, ...}}}}

A target or ignore entry is a module class name (``"Linear"``), an exact module name, or ``"re:<regex>"``
matched against the full dotted module name. A checkpoint module carries no class name, so class targets
match every packed module; name and regex targets are tried first (the more specific rule wins).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...errors import ConfigError
from .layout import KEY

QUANT_METHOD = "compressed-tensors"
STRATEGIES = ("group", "channel", "tensor")


@dataclass(frozen=True)
class WeightScheme:
    """One config group's weight arguments, normalized (``group_size`` -1 for channel/tensor strategies)."""

    name: str
    targets: tuple[str, ...]
    bits: int
    group_size: int
    sym: bool
    strategy: str
    actorder: str | None


@dataclass(frozen=True)
class CompressedTensorsConfig:
    """The parsed config: weight schemes in file order, ignore patterns, and the raw dict."""

    schemes: tuple[WeightScheme, ...]
    ignore: tuple[str, ...]
    raw: dict[str, object] = field(default_factory=dict)

    def scheme_for(self, module: str) -> WeightScheme | None:
        """The scheme governing ``module`` (``None`` when ignored or untargeted)."""
        if any(_matches_name(p, module) for p in self.ignore):
            return None
        for scheme in self.schemes:
            if any(_matches_name(t, module) for t in scheme.targets):
                return scheme
        for scheme in self.schemes:
            if any(_is_class_target(t) for t in scheme.targets):
                return scheme
        return None


def _is_class_target(target: str) -> bool:
    return not target.startswith("re:") and "." not in target and target[:1].isupper()


def _matches_name(pattern: str, module: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    return pattern == module


def is_compressed_tensors(raw: Mapping[str, object]) -> bool:
    """True when a quantization config dict was written by compressed-tensors."""
    return str(raw.get("quant_method", "")).lower() == QUANT_METHOD


def _string_list(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings, found {value!r}")
    return tuple(value)


def _weights(group: str, body: Mapping[str, object]) -> WeightScheme:
    where = f"config_groups.{group}.weights"
    weights = body.get("weights")
    if not isinstance(weights, Mapping):
        raise ConfigError(f"{where}: expected an object of weight quantization arguments, found {weights!r}")
    kind = str(weights.get("type", "int"))
    if kind != "int":
        raise ConfigError(f"{where}.type: pack-quantized stores integer weights, found {kind!r}")
    bits = weights.get("num_bits", 8)
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ConfigError(f"{where}.num_bits: expected an integer in 1..8, found {bits!r}")
    strategy = str(weights.get("strategy") or ("group" if weights.get("group_size") else "tensor"))
    if strategy not in STRATEGIES:
        raise ConfigError(f"{where}.strategy: pack-quantized readers support {STRATEGIES}, found {strategy!r}")
    group_size = -1
    if strategy == "group":
        gs = weights.get("group_size")
        if isinstance(gs, bool) or not isinstance(gs, int) or gs <= 0:
            raise ConfigError(f"{where}.group_size: strategy 'group' needs a positive integer, found {gs!r}")
        group_size = gs
    if weights.get("dynamic") not in (None, False):
        raise ConfigError(f"{where}.dynamic: dynamic weight scales are not stored, found {weights.get('dynamic')!r}")
    targets = _string_list(body.get("targets"), f"config_groups.{group}.targets")
    actorder = weights.get("actorder")
    return WeightScheme(
        name=group,
        targets=targets,
        bits=bits,
        group_size=group_size,
        sym=bool(weights.get("symmetric", True)),
        strategy=strategy,
        actorder=None if actorder is None else str(actorder),
    )


def parse_compressed_tensors_config(raw: Mapping[str, object]) -> CompressedTensorsConfig:
    """Parse a compressed-tensors ``quantization_config``; raises :class:`ConfigError` naming the field."""
    if not is_compressed_tensors(raw):
        raise ConfigError(f"quant_method: expected {QUANT_METHOD!r}, found {raw.get('quant_method')!r}")
    top_format = raw.get("format")
    groups = raw.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ConfigError(f"config_groups: expected a non-empty object of named groups, found {groups!r}")
    schemes = []
    for name, body in groups.items():
        if not isinstance(body, Mapping):
            raise ConfigError(f"config_groups.{name}: expected an object, found {body!r}")
        fmt = body.get("format") or top_format
        if fmt != KEY:
            raise ConfigError(f"config_groups.{name}.format: qformats reads {KEY!r} here, found {fmt!r}")
        schemes.append(_weights(str(name), body))
    ignore = _string_list(raw.get("ignore"), "ignore")
    return CompressedTensorsConfig(tuple(schemes), ignore, dict(raw))
