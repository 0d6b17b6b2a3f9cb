"""The fp8 layout family: FP8 element formats, the FP8 weight and its module tensors.

FP8 weights are not integer ``codes/scales/zeros``, so nothing is registered in the layout
registry; use :class:`FP8Weight`, :func:`pack_fp8`, :func:`unpack_fp8` and :func:`validate_fp8`.
"""

from .formats import FORMATS, FP8Format, fp8_format
from .layout import FP8ScaleAmbiguityError, pack_fp8, scale_semantics, scheme_from_config, unpack_fp8, validate_fp8
from .logical import FP8Weight

__all__ = [
    "FORMATS",
    "FP8Format",
    "FP8ScaleAmbiguityError",
    "FP8Weight",
    "fp8_format",
    "pack_fp8",
    "scale_semantics",
    "scheme_from_config",
    "unpack_fp8",
    "validate_fp8",
]
