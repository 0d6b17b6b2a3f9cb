"""The VPTQ layout family: vector codebooks with packed per-group indices (optional residual and outlier
codebooks, per-channel normalization and an input permutation).

A VPTQ weight is a codebook lookup, not a ``scales * (codes - zeros)`` product, so nothing is registered
in the layout registry; use :class:`VPTQSpec` / :func:`spec_from_config`, :class:`VPTQWeight`,
:func:`pack_vptq`, :func:`unpack_vptq` and :func:`validate_vptq`.
"""

from .layout import pack_vptq, tensor_specs, unpack_vptq, validate_vptq
from .logical import VPTQWeight
from .spec import VPTQSpec, spec_from_config

__all__ = ["VPTQSpec", "VPTQWeight", "pack_vptq", "spec_from_config", "tensor_specs", "unpack_vptq", "validate_vptq"]
