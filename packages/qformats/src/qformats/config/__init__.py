"""The quantization-config contract: parse, aliases, method/format rules, dynamic rules, serialization."""

from __future__ import annotations

from .aliases import FoldedConfig, fold_aliases
from .dynamic import DynamicRule, DynamicRules
from .files import (
    CONFIG_FILENAMES,
    QUANTIZE_CONFIG_FILENAME,
    config_from_folded,
    embed_in_model_config,
    find_config_file,
    parse_config,
    read_config,
    read_config_file,
    read_config_object,
    write_quantize_config,
)
from .model import CONFIG_VERSION, ModuleSpec, QuantizeConfig
from .quantizer_formats import (
    DEFAULT_FORMATS,
    QUANTIZER_FORMATS,
    SOLVER_VARIANTS,
    WEIGHT_ONLY_METHODS,
    default_format,
)
from .serialize import config_to_dict, config_to_json

__all__ = [
    "CONFIG_FILENAMES",
    "CONFIG_VERSION",
    "DEFAULT_FORMATS",
    "QUANTIZER_FORMATS",
    "QUANTIZE_CONFIG_FILENAME",
    "SOLVER_VARIANTS",
    "WEIGHT_ONLY_METHODS",
    "DynamicRule",
    "DynamicRules",
    "FoldedConfig",
    "ModuleSpec",
    "QuantizeConfig",
    "config_from_folded",
    "config_to_dict",
    "config_to_json",
    "default_format",
    "embed_in_model_config",
    "find_config_file",
    "fold_aliases",
    "parse_config",
    "read_config",
    "read_config_file",
    "read_config_object",
    "write_quantize_config",
]
