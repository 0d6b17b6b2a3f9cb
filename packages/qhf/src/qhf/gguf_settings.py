"""GGUF settings: a block type from ``bits`` + ``format`` (or a ``q4_k_m`` style alias), and the per-module
``dynamic`` overrides of a GGUF config (each names a GGUF type). Used by :mod:`qhf.weight_only_settings`."""

from __future__ import annotations

from typing import Any

from .quant_config import QuantConfigError


def gguf_dynamic(value: Any) -> dict[str, dict[str, Any]]:
    """A GGUF config's ``dynamic`` rules, each positive override naming a GGUF type (``bits`` + ``format``)."""
    from qformats.config.dynamic import DynamicRules
    from qformats.errors import ConfigError

    try:
        rules = DynamicRules.from_mapping(value)
    except ConfigError as exc:
        raise QuantConfigError(str(exc)) from None
    out: dict[str, dict[str, Any]] = {}
    for rule in rules:
        override = dict(rule.override)
        if rule.negative:
            raise QuantConfigError(f"dynamic[{rule.key!r}]: lowbit's GGUF runs quantize every module; no '-:' rules")
        if "bits" not in override or "format" not in override:
            raise QuantConfigError(
                f"dynamic[{rule.key!r}]: a GGUF override names both bits and format, found {override}"
            )
        try:
            gguf_bits_format(override["bits"], str(override["format"]).lower())
        except QuantConfigError as exc:
            raise QuantConfigError(f"dynamic[{rule.key!r}]: {exc}") from None
        out[rule.key] = override
    return out


def gguf_bits_format(bits: int | str, fmt: str | None) -> tuple[int, str]:
    """``(bits, public format)`` from ``bits`` (an int or a ``q4_k_m`` style alias) and ``format``."""
    from qformats.enums import FORMAT
    from qformats.errors import ConfigError
    from qformats.layouts.gguf import alias_for

    if isinstance(bits, str) or (fmt is not None and fmt != FORMAT.GGUF.value and not fmt.startswith("q_")):
        alias_source: int | str = bits if isinstance(bits, str) else str(fmt)
        try:
            alias = alias_for(alias_source)
        except ConfigError as exc:
            raise QuantConfigError(str(exc)) from None
        digits = alias[1:].split("_", 1)
        return int(digits[0]), "q_" + digits[1]
    try:
        alias = alias_for(int(bits), fmt)
    except ConfigError as exc:
        raise QuantConfigError(str(exc)) from None
    return int(bits), "q_" + alias[1:].split("_", 1)[1]
