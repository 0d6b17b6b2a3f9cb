"""The options each weight family takes from a resolved :class:`~qformats.config.model.QuantizeConfig`.

Two hooks of :class:`~qformats.layouts.families.WeightFamily` (wired up in
:mod:`qformats.layouts.builtin_families`) are made of the functions here:

* ``read_options(config, module, logical) -> {name: value}``: the :class:`~qformats.layouts.families.ModuleInput`
  fields one stored module is read with (``config``: the FP8 scheme or the QQQ / ParoQuant ``group_size``;
  ``qtype``: a GGUF module's ggml type after the config's ``dynamic`` overrides for ``module``); ``logical``,
  when given, is the module's logical weight (QQQ reads its own group size from it).
* ``quantize_options(config) -> {name: value}``: the fields of qalgos' ``WeightOnlySpec`` a weight-only config
  gives (FP8 format and scale method, bitsandbytes quant type and block size, the GGUF type).
* ``config_fields(config) -> {name: value}``: the family's own fields of the stored quantization config, in
  the order the reference writes them (FP8: ``weight_scale_method``, ``weight_block_size`` when set,
  ``weight_scale_semantics``; bitsandbytes 4-bit and int8: ``block_size``, ``compress_statistics``).

A setting the config lacks raises :class:`~qformats.layouts.families.FamilyInputError` naming it.
"""

from __future__ import annotations

from typing import Any

from .config.model import QuantizeConfig
from .layouts.families import FamilyInputError
from .layouts.gguf import tensor_type


def _setting(config: QuantizeConfig, name: str) -> Any:
    try:
        return config.settings[name]
    except KeyError:
        raise FamilyInputError(f"{name}: not a resolved setting of this {config.method} config") from None


def gguf_type_name(config: QuantizeConfig, module: str | None = None) -> str:
    """The ggml type stored for a GGUF config's ``bits`` + public ``format`` (``Q4_0``, ``Q4_K``, ``Q8_0`` ...),
    for ``module`` after the config's ``dynamic`` overrides (``QuantizeConfig.for_module``: first positive match)."""
    bits, fmt = config.width, str(config.format)
    if module is not None and config.rules is not None:
        spec = config.for_module(module)
        override = spec.override if spec is not None else {}
        bits, fmt = int(override.get("bits", bits)), str(override.get("format", fmt))
    return str(tensor_type(bits, fmt).name)


def fp8_scheme(config: QuantizeConfig) -> dict[str, Any]:
    """The FP8 scheme fields ``unpack_fp8`` reads (format, scale method, block, ``inverse`` semantics)."""
    scheme: dict[str, Any] = {
        "format": config.format,
        "weight_scale_method": _setting(config, "weight_scale_method"),
        "weight_scale_semantics": "inverse",
    }
    block = _setting(config, "weight_block_size")
    if block is not None:
        scheme["weight_block_size"] = list(block)
    return scheme


def fp8_read_options(config: QuantizeConfig, module: str | None, logical: Any) -> dict[str, Any]:
    """FP8: the scheme (``config``)."""
    return {"config": fp8_scheme(config)}


def gguf_read_options(config: QuantizeConfig, module: str | None, logical: Any) -> dict[str, Any]:
    """GGUF: the module's ggml type (``qtype``)."""
    return {"qtype": gguf_type_name(config, module)}


def qqq_read_options(config: QuantizeConfig, module: str | None, logical: Any) -> dict[str, Any]:
    """QQQ: the group size (the logical weight's own when given)."""
    return {"config": {"group_size": logical.group_size if logical is not None else config.group_size}}


def group_size_read_options(config: QuantizeConfig, module: str | None, logical: Any) -> dict[str, Any]:
    """ParoQuant: the config's group size."""
    return {"config": {"group_size": config.group_size}}


def fp8_quantize_options(config: QuantizeConfig) -> dict[str, Any]:
    """FP8: ``fp8_format``, ``scale_method``, ``block_size``."""
    return {
        "fp8_format": str(config.format),
        "scale_method": _setting(config, "weight_scale_method"),
        "block_size": _setting(config, "weight_block_size"),
    }


def bnb4_quantize_options(config: QuantizeConfig) -> dict[str, Any]:
    """bitsandbytes 4-bit: ``quant_type``, ``block_size``, ``compress_statistics``."""
    return {
        "quant_type": str(config.format),
        "block_size": _setting(config, "block_size"),
        "compress_statistics": _setting(config, "compress_statistics"),
    }


def no_options(config: QuantizeConfig) -> dict[str, Any]:
    """bitsandbytes int8: none."""
    return {}


def gguf_quantize_options(config: QuantizeConfig) -> dict[str, Any]:
    """GGUF: ``gguf_type``, the config's base ggml type."""
    return {"gguf_type": gguf_type_name(config)}


def fp8_config_fields(config: QuantizeConfig) -> dict[str, Any]:
    """FP8's stored fields: the scale method, the block when set, ``inverse`` semantics."""
    scheme = fp8_scheme(config)
    fields: dict[str, Any] = {"weight_scale_method": scheme["weight_scale_method"]}
    if "weight_block_size" in scheme:
        fields["weight_block_size"] = scheme["weight_block_size"]
    fields["weight_scale_semantics"] = "inverse"
    return fields


def bnb_config_fields(config: QuantizeConfig) -> dict[str, Any]:
    """bitsandbytes' stored fields (4-bit and int8 alike): ``block_size``, ``compress_statistics``."""
    return {
        "block_size": _setting(config, "block_size"),
        "compress_statistics": _setting(config, "compress_statistics"),
    }
