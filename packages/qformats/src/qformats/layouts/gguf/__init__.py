"""The gguf layout family: ggml block codecs and the GGUF-family module layout.

Importing this package registers :class:`~qformats.layouts.gguf.layout.GGUFLayout` under ``"gguf"``.
Public helpers: :func:`encode_rows`, :func:`decode_rows`, :class:`GGUFWeight`, :func:`ggml_type`,
:func:`tensor_type` (config bits/format -> stored ggml type), :func:`mixture_types` /
:func:`mixture_dynamic` (llama.cpp's q4_k_m-style per-module types and their config overrides).
"""

from ..registry import register_layout
from .aliases import alias_for, tensor_type
from .codec import decode_rows, encodable_types, encode_rows
from .layout import GGUFLayout
from .logical import GGUFWeight, unpack_gguf, validate_gguf
from .mixtures import MIXTURE_BASE, mixture_dynamic, mixture_type, mixture_types
from .types import GGMLType, ggml_type

register_layout(GGUFLayout())

__all__ = [
    "MIXTURE_BASE",
    "GGMLType",
    "GGUFLayout",
    "GGUFWeight",
    "alias_for",
    "decode_rows",
    "encodable_types",
    "encode_rows",
    "ggml_type",
    "mixture_dynamic",
    "mixture_type",
    "mixture_types",
    "tensor_type",
    "unpack_gguf",
    "validate_gguf",
]
