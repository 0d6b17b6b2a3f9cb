"""A checkpoint's quantization config, read through the package's one config parser.

File priority and parsing belong to :mod:`qformats.config` (``find_config_file``, ``parse_config``):
the first that exists of ``quantize_config.json``, ``quant_config.json``, ``config.json`` (its nested
``quantization_config``), every alias folded there. This module only adapts the parsed
:class:`~qformats.config.QuantizeConfig` to :class:`QuantFields`, the few values the directory reader
needs (bits, group size, symmetry, method, format, layout key, pack dtype, dynamic rules), and turns
config lookup errors into :class:`CheckpointFormatError` naming the directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..config.aliases import BITS_ALIASES
from ..config.dynamic import DynamicRules
from ..config.files import CONFIG_FILENAMES, find_config_file, parse_config, read_config_object
from ..config.model import QuantizeConfig
from ..errors import CheckpointFormatError, ConfigError

CONFIG_PRIORITY: tuple[str, ...] = CONFIG_FILENAMES


@dataclass(frozen=True)
class QuantFields:
    """The config fields a checkpoint reader needs; ``layout`` is the registry key for the modules.

    ``dynamic`` is the config's ``pattern -> override`` object in file order; ``config`` is the parsed
    config when the fields came from :func:`read_quant_fields` (``None`` for readers of formats the
    config contract does not model, which build the fields themselves).
    """

    bits: int
    group_size: int
    sym: bool
    method: str
    format: str
    layout: str
    pack_dtype: str
    dynamic: dict[str, dict[str, object]] = field(default_factory=dict)
    source_file: str = ""
    config: QuantizeConfig | None = field(default=None, compare=False)

    @cached_property
    def rules(self) -> DynamicRules | None:
        """``dynamic`` as :class:`~qformats.config.DynamicRules` (``None`` when there are none)."""
        if self.config is not None:
            return self.config.rules
        return DynamicRules.from_mapping(self.dynamic) if self.dynamic else None


def find_quant_config(directory: str | Path) -> tuple[Path, dict[str, object]]:
    """``(file, quantization dict)`` from the first config file present, by the reference's priority."""
    root = Path(directory)
    try:
        path = find_config_file(root)
        _, raw = read_config_object(path)
    except ConfigError as exc:
        raise CheckpointFormatError(str(exc)) from None
    if not isinstance(raw, dict):
        raise CheckpointFormatError(f"{path}: expected a JSON object, found {type(raw).__name__}")
    return path, raw


def fields_from_config(config: QuantizeConfig, source_file: str = "") -> QuantFields:
    """The reader's view of a parsed config (layout key from :attr:`QuantizeConfig.layout`)."""
    rules = config.rules
    return QuantFields(
        bits=config.width,
        group_size=config.group_size,
        sym=config.sym,
        method=str(config.method),
        format=str(config.format),
        layout=config.layout,
        pack_dtype=config.pack_dtype,
        dynamic=rules.to_mapping() if rules is not None else {},
        source_file=source_file,
        config=config,
    )


def read_quant_fields(raw: Mapping[str, Any], source_file: str = "") -> QuantFields:
    """Parse a quantization config dict with :func:`qformats.config.parse_config` into :class:`QuantFields`.

    A checkpoint must state its bits (``bits``, ``w_bit`` or ``wbits``); every other field follows the
    parser's defaults and rules. Raises :class:`ConfigError` naming the field.
    """
    if isinstance(raw, Mapping) and not any(str(k).lower() in BITS_ALIASES for k in raw):
        raise ConfigError(f"{source_file or '<config>'}: bits: required field missing")
    config = parse_config(raw, source=source_file or "<config>")
    return fields_from_config(config, source_file)


def module_overrides(fields: QuantFields, module: str) -> dict[str, object] | None:
    """The ``dynamic`` override for ``module``: ``None`` when a ``-:`` rule excludes it, else a dict.

    The rules are :class:`~qformats.config.DynamicRules` (negatives first, then first positive match,
    start-anchored regex over the module's dotted name).
    """
    rules = fields.rules
    if rules is None:
        return {}
    if rules.excluded(module):
        return None
    return dict(rules.override(module))
