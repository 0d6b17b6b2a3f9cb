"""The MLX affine family: the uint32 code words, scales and biases that mlx_lm's ``QuantizedLinear`` loads.

MLX stores a bias per group instead of an integer zero point, so nothing is registered in the layout
registry; use :func:`to_mlx` (exact, from a logical weight), :func:`unpack_mlx`, :class:`MLXAffineWeight`
and the word packing in :mod:`.words`. The directory writer is
:func:`qformats.checkpoint.mlx_export.export_mlx`.
"""

from .affine import MLX_GROUP_SIZES, MLXAffineWeight, mlx_group_size, mlx_refusal, to_mlx, unpack_mlx
from .words import MLX_BITS, pack_words, unpack_words

__all__ = [
    "MLX_BITS",
    "MLX_GROUP_SIZES",
    "MLXAffineWeight",
    "mlx_group_size",
    "mlx_refusal",
    "pack_words",
    "to_mlx",
    "unpack_mlx",
    "unpack_words",
]
