"""The ParoQuant layout family: AWQ GEMM 4-bit weights whose layer rotates its inputs first.

The layer is not a ``scales * (codes - zeros)`` product of its inputs (the transform comes first), so
nothing is registered in the layout registry; use :class:`ParoQuantWeight`, :func:`pack_paroquant`,
:func:`unpack_paroquant`, :func:`validate_paroquant` and :func:`infer_meta`.
"""

from .layout import infer_meta, pack_paroquant, unpack_paroquant, validate_paroquant
from .logical import ParoQuantWeight
from .rotation import fold_into_weight, identity_rotation, rotate_inputs

__all__ = [
    "ParoQuantWeight",
    "fold_into_weight",
    "identity_rotation",
    "infer_meta",
    "pack_paroquant",
    "rotate_inputs",
    "unpack_paroquant",
    "validate_paroquant",
]
