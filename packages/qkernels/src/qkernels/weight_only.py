"""Families outside the layout registry: FP8, bitsandbytes, GGUF blocks, QQQ, ParoQuant, VPTQ, EXL3.

Their logical objects (``qformats.layouts.fp8.FP8Weight``, ``qformats.layouts.bnb.BnB4Weight`` /
``BnB8Weight``, ``qformats.layouts.gguf.GGUFWeight``, ``qformats.layouts.qqq.QQQWeight``,
``qformats.layouts.paroquant.ParoQuantWeight``, ``qformats.layouts.vptq.VPTQWeight``,
``qformats.layouts.exl3.EXL3Weight``) are not
``scales * (codes - zeros)`` integers; they offer ``dequantize() -> float32 [out, in]``, which the
``torch`` reference backend serves. Module tensors:

* ``fp8``: ``weight`` (FP8 bit patterns, uint8 ``[out, in]``), ``weight_scale_inv`` float32; the scheme
  comes from ``config`` (format, weight_scale_method, weight_block_size, weight_scale_semantics).
* ``bitsandbytes``: 4-bit ``weight`` uint8 packed plus its quant-state tensors (either naming); 8-bit
  ``weight`` int8 ``[out, in]`` plus ``weight_scb`` (or ``SCB``).
* ``gguf``: ``qweight`` uint8 ``[out, row_bytes]`` of the ggml type ``qtype`` (Q4_K, Q6_K, Q8_0, ...).
* ``qqq``: ``B`` int32 ``[in / 16, out * 2]``, ``s_channel`` float32 ``[1, out]``, ``s_group`` float16
  ``[in / group_size, out]`` (empty when per-channel); ``group_size`` comes from ``config`` (default -1).
  The torch backend multiplies unquantized activations by the dequantized weight: the reference's QQQ
  kernels also quantize activations to int8 per token, which this backend does not.
* ``paroquant``: the AWQ GEMM tensors plus ``pairs``, ``theta``, ``channel_scales``; ``group_size`` from
  ``config``. Served as its dense equivalent (the AWQ weight with the input transform folded in, float64
  then float32); the reference rotates the activations in their own dtype instead.
* ``vptq``: ``centroids.weight``, ``indices`` and whatever the config enables (``res_centroids.weight``,
  ``outlier_centroids.weight``, ``outlier_indices``, ``weight_scale``, ``weight_bias``, ``perm``); the VPTQ
  fields (``vector_lens``, ``num_centroids``, ...) come from ``config``. Dequantized in the codebook dtype
  as the reference does (a torch bfloat16 codebook is computed in bfloat16).
* ``exl3``: ``trellis``, ``suh``, ``svh`` and an optional ``mcg`` / ``mul1`` codebook marker; served as the
  dense float32 weight (decoded trellis between the two Hadamard sides).

Every family may carry a ``bias``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from qformats.layouts.families import FamilyInputError, ModuleInput, family_for_tensors, family_methods
from qformats.layouts.registry import LayoutMeta

from .build import build_module
from .checkpoint import LoadedCheckpoint, to_numpy
from .contract import KernelContract
from .device import Target
from .errors import KernelInputError
from .module import QuantLinear
from .registry import AUTO


def weight_only_families() -> tuple[str, ...]:
    """The family names :func:`weight_only_linear` takes: the config methods of qformats' weight families
    other than ``integer`` (``fp8``, ``bitsandbytes``, ``gguf``, ``qqq``, ``paroquant``, ``vptq``, ``exl3``)."""
    return family_methods()


def load_weight_only(
    family: str,
    tensors: Mapping[str, object],
    *,
    in_features: int,
    out_features: int,
    config: Mapping[str, Any] | None = None,
    semantics: str | None = None,
    qtype: str | None = None,
) -> LoadedCheckpoint:
    """Copy and read one weight-only module (see the module docstring); raises naming the tensor."""
    arrays = {str(k): to_numpy(str(k), v) for k, v in tensors.items()}
    bias = arrays.pop("bias", None)
    if bias is not None and bias.shape != (out_features,):
        raise KernelInputError(f"tensor 'bias': expected shape ({out_features},), found {bias.shape}")
    config = dict(config or {})
    try:
        found = family_for_tensors(family, arrays)
        marker = tensors.get(found.bfloat16_compute_tensor) if found.bfloat16_compute_tensor else None
        if isinstance(marker, torch.Tensor) and marker.dtype == torch.bfloat16:
            config.setdefault("compute_dtype", "bfloat16")  # the numpy copy is float32; compute as the reference
        if found.read is None:
            raise FamilyInputError(f"family {family!r}: expected one of {', '.join(family_methods())}")
        read = found.read(arrays, ModuleInput(in_features, out_features, config, qtype, semantics))
    except FamilyInputError as exc:
        raise KernelInputError(str(exc)) from exc
    logical, kind, bits, group = read.logical, found.logical_kind, read.bits, read.group_size
    shape = found.shape(logical)
    if shape != (out_features, in_features):
        raise KernelInputError(f"{family}: expected a [{out_features}, {in_features}] weight, found {list(shape)}")
    meta = LayoutMeta(bits=bits, group_size=group, in_features=in_features, out_features=out_features, sym=True)
    contract = KernelContract.from_meta(family, meta, method=family)
    contract = KernelContract(**{**contract.__dict__, "logical_kind": kind})
    return LoadedCheckpoint(family, meta, arrays, bias, logical, contract)


def weight_only_linear(
    family: str,
    tensors: Mapping[str, object],
    *,
    in_features: int,
    out_features: int,
    config: Mapping[str, Any] | None = None,
    semantics: str | None = None,
    qtype: str | None = None,
    backend: str = AUTO,
    device: str | torch.device | Target = "cpu",
    dtype: torch.dtype = torch.float32,
    **options: Any,
) -> QuantLinear:
    """A module for one module's tensors of a family in :func:`weight_only_families`, built like ``quant_linear``."""
    loaded = load_weight_only(
        family, tensors, in_features=in_features, out_features=out_features, config=config,
        semantics=semantics, qtype=qtype,
    )  # fmt: skip
    return build_module(loaded, backend=backend, device=device, dtype=dtype, **options)
