"""The QQQ layout family (W4A8: 4-bit codes, float16 group and float32 channel scales).

QQQ weights are not one ``scales * (codes - zeros)`` product, so nothing is registered in the layout
registry; use :class:`QQQWeight`, :func:`pack_qqq`, :func:`unpack_qqq`, :func:`validate_qqq` and
:func:`infer_meta`. ``QQQWeight.to_quantized_weight`` / ``from_quantized_weight`` transcode exactly.
"""

from .layout import infer_meta, is_per_channel, pack_qqq, unpack_qqq, validate_qqq
from .logical import QQQWeight

__all__ = ["QQQWeight", "infer_meta", "is_per_channel", "pack_qqq", "unpack_qqq", "validate_qqq"]
