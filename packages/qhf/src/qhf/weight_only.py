"""Whole-model weight-only families: FP8, bitsandbytes (NF4 / FP4 / int8) and GGUF block types.

These are not ``scales * (codes - zeros)`` integer layouts, so they bypass qformats' layout registry: the
loop quantizes each linear with qalgos' ``quantize_weight_only`` (no calibration) and packs it with the
family's packer; the in-memory module, the reloaded module and verify-after-save all go through
``qkernels.weight_only_linear``. This module maps the run's :class:`~qformats.config.QuantizeConfig` (resolved
by :func:`qhf.quant_config.read_quantize_config`; its ``settings`` hold the fields below) onto those pieces:

* ``method="fp8"``: ``format`` is the FP8 dtype name (``float8_e4m3fn`` default); ``weight_scale_method``
  ``row`` (default) / ``tensor`` / ``block`` with ``weight_block_size [rows, cols]``. Tensors per module:
  ``weight`` (FP8 bit patterns, stored uint8 ``[out, in]``) and ``weight_scale_inv`` float32 (``inverse``
  semantics: dequantized = codes / scale_inv).
* ``method="bitsandbytes"``: ``format`` ``nf4`` / ``fp4`` (bits 4, ``block_size`` 64 default,
  ``compress_statistics`` True default) or ``int8`` (bits 8). Tensors: ``weight`` plus ``weight_absmax``,
  ``weight_quant_map``, ``weight_nested_*``, ``weight_quant_state`` (4-bit) or ``weight_scb`` (8-bit).
* ``method="gguf"``: ``bits`` + public ``format`` (``q_0``, ``q_k``, ``q_k_s``, ``q_k_m``) name the ggml
  type (``4 + q_0`` -> Q4_0, ``4 + q_k`` -> Q4_K, ``8 + q_0`` -> Q8_0). ``q_k_m`` / ``q_k_s`` are llama.cpp's
  mixtures: the base K type plus higher types for some ``v_proj`` / ``down_proj`` modules, recorded as the
  config's ``dynamic`` overrides (:func:`with_mixture`). Tensor: ``qweight`` uint8 ``[out, row_bytes]``
  (llama.cpp block bytes per output row).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from qformats.layouts.families import WeightFamily, family_for_config

from .config_view import algorithm, method_of

if TYPE_CHECKING:
    from qformats.config import QuantizeConfig


def weight_family(settings: QuantizeConfig) -> WeightFamily:
    """The qformats weight family of the settings' ``method`` and ``format`` (``bitsandbytes`` + ``int8`` ->
    ``int8``, other bitsandbytes formats -> ``bnb4``)."""
    return family_for_config(algorithm(settings), settings.format)


def spec_family(settings: QuantizeConfig) -> str:
    """qalgos ``WeightOnlySpec.family``, the family key: ``fp8``, ``bnb4``, ``int8`` or ``gguf``."""
    return weight_family(settings).key


def gguf_type_name(settings: QuantizeConfig, module: str | None = None) -> str:
    """The ggml type stored for a GGUF config's ``bits`` + public ``format`` (``Q4_0``, ``Q4_K``, ``Q8_0`` ...),
    for ``module`` after the config's ``dynamic`` overrides (``QuantizeConfig.for_module``: first positive match)."""
    from qformats.family_options import gguf_type_name as stored_type

    return stored_type(settings, module)


def is_mixture(settings: QuantizeConfig) -> bool:
    """A GGUF ``q_k_m`` / ``q_k_s`` config: llama.cpp's per-module mixture (:mod:`qformats.layouts.gguf.mixtures`)."""
    return settings.format in method_of(settings).mixture_formats


def with_mixture(settings: QuantizeConfig, modules: list[tuple[str, int]], layers: int) -> QuantizeConfig:
    """``settings`` with the mixture's per-module types recorded as ``dynamic`` overrides (the reference's way),
    for ``(module, layer)`` pairs of a ``layers``-layer decoder. A config that already has ``dynamic`` (a reloaded
    mixture, or the user's own choice) is kept as given; other settings are returned unchanged."""
    if not is_mixture(settings) or settings.rules is not None:
        return settings
    from qformats.layouts.gguf import mixture_dynamic, mixture_types

    alias = f"q{settings.width}{str(settings.format)[1:]}"
    dynamic = mixture_dynamic(alias, mixture_types(alias, modules, layers))
    return settings.with_changes(dynamic=dynamic or None)


def module_specs(settings: QuantizeConfig, modules: list[str]) -> dict[str, Any]:
    """``{module: WeightOnlySpec}`` for the modules whose GGUF type differs from the config's base type (a GGUF
    config: ``GGUFMethod.module_specs``)."""
    if settings.rules is None:
        return {}
    from qalgos.weight_only import WeightOnlySpec

    base = gguf_type_name(settings)
    out = {}
    for name in modules:
        qtype = gguf_type_name(settings, name)
        if qtype != base:
            out[name] = WeightOnlySpec("gguf", gguf_type=qtype)
    return out


def weight_only_spec(settings: QuantizeConfig) -> Any:
    """The qalgos ``WeightOnlySpec`` these settings describe (the family's ``quantize_options``)."""
    from qalgos.weight_only import WeightOnlySpec

    family = weight_family(settings)
    options = family.quantize_options(settings) if family.quantize_options is not None else {}
    return WeightOnlySpec(family.key, **options)


def kernel_family(settings: QuantizeConfig) -> str:
    """``qkernels.weight_only_linear``'s family name: ``fp8``, ``bitsandbytes`` or ``gguf``."""
    return algorithm(settings)


def fp8_config(settings: QuantizeConfig) -> dict[str, Any]:
    """The FP8 scheme fields qformats' ``unpack_fp8`` reads (format, scale method, block, semantics)."""
    from qformats.family_options import fp8_scheme

    return fp8_scheme(settings)


def kernel_options(settings: QuantizeConfig, module: str | None = None, logical: Any = None) -> dict[str, Any]:
    """``qkernels.weight_only_linear``'s reading options for the settings' family (none for bitsandbytes): the
    family's ``read_options`` (the FP8 scheme as ``config``, a GGUF module's ggml type as ``qtype`` after
    ``dynamic`` overrides for ``module``, the QQQ / ParoQuant ``group_size``; QQQ's from its ``logical`` weight
    when given)."""
    read_options = weight_family(settings).read_options
    return read_options(settings, module, logical) if read_options is not None else {}


def marker_suffix(settings: QuantizeConfig) -> str:
    """The tensor suffix whose presence marks a stored module of the settings' family."""
    return weight_family(settings).markers[0]


def is_module_tensor(suffix: str) -> bool:
    """Whether a tensor suffix belongs to a weight-only module's stored form (not its dense ``bias``)."""
    return suffix == "qweight" or suffix == "weight" or suffix.startswith("weight_")


def weight_only_module(
    settings: QuantizeConfig,
    tensors: dict[str, Any],
    in_features: int,
    out_features: int,
    *,
    backend: str,
    dtype: torch.dtype,
    module: str | None = None,
    device: str | torch.device = "cpu",
) -> torch.nn.Module:
    """A qkernels module for one stored weight-only module (``tensors`` may include ``bias``; ``module``: its
    name, which picks its GGUF type under ``dynamic`` overrides) on ``device``."""
    from qkernels import weight_only_linear

    return weight_only_linear(
        kernel_family(settings),
        tensors,
        in_features=in_features,
        out_features=out_features,
        backend=backend,
        device=device,
        dtype=dtype,
        **kernel_options(settings, module),
    )


def weight_only_logical(
    settings: QuantizeConfig, tensors: dict[str, Any], in_features: int, out_features: int, module: str | None = None
) -> Any:
    """The family's qformats logical weight read from one module's stored tensors (raises naming the tensor)."""
    from qkernels.weight_only import load_weight_only

    loaded = load_weight_only(
        kernel_family(settings),
        tensors,
        in_features=in_features,
        out_features=out_features,
        **kernel_options(settings, module),
    )
    return loaded.logical


#: FP8 format -> the safetensors dtype its ``weight`` is stored as (the reference's; the ``fnuz`` formats have
#: no safetensors dtype and stay uint8 bit patterns).
FP8_STORAGE = {"float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}


def fp8_storage_dtypes(settings: QuantizeConfig, modules: list[str]) -> dict[str, str]:
    """The writer's ``dtypes`` entries that store each FP8 module's ``weight`` under its FP8 dtype, as the
    reference does (a uint8 tag would make engines cast the bit patterns as numbers)."""
    tag = FP8_STORAGE.get(str(settings.format))  # only FP8's formats are FP8 dtype names
    return {} if tag is None else {f"{name}.weight": tag for name in modules}
