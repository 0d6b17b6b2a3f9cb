"""The EXL3 layout family (exllamav3 trellis codes): read, validate, dequantize and rewrite module tensors.

An EXL3 weight is a trellis-coded, Hadamard-rotated matrix, not a ``scales * (codes - zeros)`` product,
so nothing is registered in the layout registry; use :class:`EXL3Weight`, :func:`pack_exl3`,
:func:`unpack_exl3` and :func:`validate_exl3`.
"""

from .layout import codebook_of, pack_exl3, unpack_exl3, validate_exl3
from .logical import EXL3Weight

__all__ = ["EXL3Weight", "codebook_of", "pack_exl3", "unpack_exl3", "validate_exl3"]
