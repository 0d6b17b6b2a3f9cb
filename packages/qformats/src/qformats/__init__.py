"""Quantized checkpoint layouts and the quantization-config contract (numpy only).

The names most callers need are re-exported here; everything else lives in its submodule
(``qformats.layouts.gptq``, ``qformats.config`` ...). Importing qformats never imports torch.
"""

from .config import QuantizeConfig, parse_config, read_config
from .enums import FORMAT, METHOD, resolve_format_family
from .errors import (
    ConfigError,
    DuplicateRegistrationError,
    LayoutError,
    QFormatsError,
    UnsupportedLayoutError,
)
from .layouts.registry import LayoutMeta, get_layout, register_layout, registered_layouts
from .logical import QuantizedWeight
from .validate import validate
from .violations import Violation

__version__ = "0.1.0"

__all__ = [
    "FORMAT",
    "METHOD",
    "ConfigError",
    "DuplicateRegistrationError",
    "LayoutError",
    "LayoutMeta",
    "QFormatsError",
    "QuantizeConfig",
    "QuantizedWeight",
    "UnsupportedLayoutError",
    "Violation",
    "__version__",
    "get_layout",
    "parse_config",
    "read_config",
    "register_layout",
    "registered_layouts",
    "resolve_format_family",
    "validate",
]
