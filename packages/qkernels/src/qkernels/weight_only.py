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

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from qformats.layouts.bnb import unpack_bnb4, unpack_bnb8
from qformats.layouts.exl3 import EXL3Weight, unpack_exl3
from qformats.layouts.fp8 import unpack_fp8
from qformats.layouts.gguf import GGUFWeight
from qformats.layouts.paroquant import ParoQuantWeight, unpack_paroquant
from qformats.layouts.paroquant import infer_meta as paroquant_meta
from qformats.layouts.qqq import infer_meta as qqq_meta
from qformats.layouts.qqq import unpack_qqq
from qformats.layouts.registry import LayoutMeta
from qformats.layouts.vptq import VPTQWeight, spec_from_config, unpack_vptq

from .build import build_module
from .checkpoint import LoadedCheckpoint, to_numpy
from .contract import KernelContract
from .device import Target
from .errors import KernelInputError
from .module import QuantLinear
from .registry import AUTO

WEIGHT_ONLY_FAMILIES = ("fp8", "bitsandbytes", "gguf", "qqq", "paroquant", "vptq", "exl3")


def _shape(logical: Any) -> tuple[int, ...]:
    """``[out, in]`` of a weight-only logical object, read from its fields (nothing is dequantized)."""
    if isinstance(logical, GGUFWeight):
        return (logical.out_features, logical.in_features)
    if isinstance(logical, ParoQuantWeight):
        return (logical.weight.out_features, logical.weight.in_features)
    if isinstance(logical, EXL3Weight):
        return (logical.out_features, logical.in_features)
    if isinstance(logical, VPTQWeight):
        return (logical.spec.out_features, logical.spec.in_features)
    if hasattr(logical, "codes") and isinstance(logical.codes, np.ndarray):  # FP8Weight, QQQWeight
        return tuple(logical.codes.shape)
    if hasattr(logical, "scb"):  # BnB8Weight
        return tuple(logical.weight.shape)
    return tuple(int(d) for d in logical.shape)  # BnB4Weight


def _read(
    family: str,
    arrays: dict[str, np.ndarray],
    config: Mapping[str, Any],
    semantics: str | None,
    qtype: str | None,
    in_features: int,
    out_features: int,
) -> tuple[object, str, int, int]:
    """(logical, logical_kind, bits, group_size) of one module's tensors."""
    if family == "fp8":
        return unpack_fp8(arrays, config, semantics), "fp8", 8, -1
    if family == "bitsandbytes":
        weight = arrays.get("weight")
        if weight is None:
            raise KernelInputError("bitsandbytes: tensor 'weight' is missing")
        if weight.dtype == np.int8:
            return unpack_bnb8(arrays), "bnb8", 8, -1
        w4 = unpack_bnb4(arrays)
        return w4, "bnb4", 4, int(w4.blocksize)
    if family == "gguf":
        if qtype is None:
            raise KernelInputError("gguf: pass qtype= (the ggml type is not recoverable from the block bytes)")
        if "qweight" not in arrays:
            raise KernelInputError("gguf: tensor 'qweight' is missing")
        w = GGUFWeight(arrays["qweight"], qtype, in_features)
        digits = re.search(r"\d+", w.type.name)
        return w, "gguf_blocks", int(digits.group()) if digits else 8, int(w.type.block_size)
    if family in ("qqq", "paroquant"):
        group_size = config.get("group_size", -1)
        if isinstance(group_size, bool) or not isinstance(group_size, int):
            raise KernelInputError(f"{family}: config group_size must be an integer, found {group_size!r}")
        if family == "qqq":
            qqq = unpack_qqq(arrays, qqq_meta(arrays, group_size=group_size))
            return qqq, "qqq", 4, qqq.group_size
        return unpack_paroquant(arrays, paroquant_meta(arrays, group_size=group_size)), "paroquant", 4, group_size
    if family == "exl3":
        exl3 = unpack_exl3(arrays, in_features, out_features)
        return exl3, "exl3", exl3.bits, -1
    if family == "vptq":
        spec = spec_from_config(config, in_features, out_features)
        vptq = unpack_vptq(arrays, spec, compute_dtype=config.get("compute_dtype"))
        return vptq, "vptq", int(config.get("bits", 2)), spec.groups[1]
    raise KernelInputError(f"family {family!r}: expected one of {', '.join(WEIGHT_ONLY_FAMILIES)}")


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
    books = tensors.get("centroids.weight")
    if family == "vptq" and isinstance(books, torch.Tensor) and books.dtype == torch.bfloat16:
        config.setdefault("compute_dtype", "bfloat16")  # the numpy copy is float32; compute as the reference
    logical, kind, bits, group = _read(family, arrays, config, semantics, qtype, in_features, out_features)
    if _shape(logical) != (out_features, in_features):
        raise KernelInputError(
            f"{family}: expected a [{out_features}, {in_features}] weight, found {list(_shape(logical))}"
        )
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
    """A module for one module's tensors of a family in :data:`WEIGHT_ONLY_FAMILIES`, built like ``quant_linear``."""
    loaded = load_weight_only(
        family, tensors, in_features=in_features, out_features=out_features, config=config,
        semantics=semantics, qtype=qtype,
    )  # fmt: skip
    return build_module(loaded, backend=backend, device=device, dtype=dtype, **options)
