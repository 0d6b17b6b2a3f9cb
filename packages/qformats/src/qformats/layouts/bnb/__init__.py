"""The bnb layout family: bitsandbytes NF4/FP4 (with nested statistics) and int8 row-scaled weights.

These are codebook/row-scale families, not integer ``codes/scales/zeros``, so nothing is registered
in the layout registry; use :class:`BnB4Weight` / :func:`pack_bnb4` / :func:`unpack_bnb4` and
:class:`BnB8Weight` / :func:`pack_bnb8` / :func:`unpack_bnb8`. No bitsandbytes install is needed.
"""

from .int8 import BnB8Weight, pack_bnb8, unpack_bnb8, validate_bnb8
from .quant4 import BnB4Weight, NestedStats
from .quant_state import detect_naming, pack_bnb4, quant_state_record, unpack_bnb4, validate_bnb4
from .tables import DYNAMIC, FP4, NF4, quant_map

__all__ = [
    "DYNAMIC",
    "FP4",
    "NF4",
    "BnB4Weight",
    "BnB8Weight",
    "NestedStats",
    "detect_naming",
    "pack_bnb4",
    "pack_bnb8",
    "quant_map",
    "quant_state_record",
    "unpack_bnb4",
    "unpack_bnb8",
    "validate_bnb4",
    "validate_bnb8",
]
