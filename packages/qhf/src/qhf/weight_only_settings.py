"""The weight-only methods' config checks (FP8, bitsandbytes, GGUF): widths and formats their packers store,
and their settings resolved into ``QuantizeConfig.settings`` by :func:`qhf.quant_config.read_quantize_config`.

FP8: 8-bit ``float8_e4m3fn`` by default; ``weight_scale_method`` ``row`` (default) / ``tensor`` / ``block`` with
``weight_block_size`` ``(rows, cols)``; scales written with ``inverse`` semantics. bitsandbytes: 4-bit ``fp4``
(default) / ``nf4`` or 8-bit ``int8``; ``block_size`` 64 (a power of two in 32..4096) and nested statistics by
default. GGUF: ``bits`` + public format (or a ``q4_k_m`` style alias) and per-module ``dynamic`` overrides
(:mod:`qhf.gguf_settings`). The calibration settings mean nothing without calibration and are not read.
"""

from __future__ import annotations

from typing import Any

from qformats.config import QuantizeConfig
from qformats.layouts.families import family_for_config

from .methods.builtin_settings import WeightOnlySettings
from .methods.closed_settings import settings_dict
from .methods.registry import get_method
from .quant_config import QuantConfigError

FP8_SCALE_METHODS = ("tensor", "row", "block")
#: The weight-only settings and their defaults: the fields of the built-in methods' typed settings class,
#: :class:`qhf.methods.builtin_settings.WeightOnlySettings`.
DEFAULTS: dict[str, Any] = settings_dict(WeightOnlySettings())


def weight_only_bits_format(method: str, bits: Any, fmt: str | None) -> tuple[int, str]:
    """``(bits, public format)`` of an FP8 / bitsandbytes / GGUF config with the reference's defaults (FP8
    8-bit ``float8_e4m3fn``; bitsandbytes 4-bit ``fp4``, 8-bit ``int8``; GGUF ``bits`` + public format, a
    ``q4_k_m`` style alias too: the method's ``bits_format``); refuses a width or format lowbit's packers do not
    store, naming the field."""
    quant_method = get_method(method)
    if bits is None:
        bits = quant_method.default_bits
    if isinstance(bits, bool) or not isinstance(bits, (int, str)):
        raise QuantConfigError(f"bits: expected an integer, found {bits!r}")
    bits, fmt = quant_method.bits_format(bits, fmt)
    if fmt not in quant_method.formats:
        choices = ", ".join(quant_method.formats)
        raise QuantConfigError(f"format: method {method!r} writes one of {choices}, found {fmt!r}")
    return int(bits), fmt


def fp8_bits_format(bits: Any, fmt: str | None, default_format: str) -> tuple[Any, str]:
    """FP8: 8-bit only; ``fmt`` or ``default_format``."""
    if bits != 8:
        raise QuantConfigError(f"bits: FP8 stores 8-bit weights, found {bits!r}")
    return bits, fmt or default_format


def bnb_bits_format(bits: Any, fmt: str | None, default_format: str, method: str) -> tuple[Any, str]:
    """bitsandbytes (config method ``method``): 4-bit (``default_format``, or ``nf4`` / ``fp4``) or 8-bit
    (``int8``); the weight family the format selects says which width it stores (``stored_bits``)."""
    if bits not in (4, 8):
        raise QuantConfigError(f"bits: bitsandbytes stores 4-bit (nf4/fp4) or 8-bit (int8), found {bits!r}")
    fmt = fmt or ("int8" if bits == 8 else default_format)
    if bits not in family_for_config(method, fmt).stored_bits:
        raise QuantConfigError(f"format: bitsandbytes {fmt!r} does not store {bits}-bit weights")
    return bits, fmt


def weight_only_settings(method: str, cfg: QuantizeConfig) -> dict[str, Any]:
    """The :data:`DEFAULTS` settings of an FP8 / bitsandbytes / GGUF run on ``cfg``, checked (raises naming the
    field); a GGUF config's ``dynamic`` rules are its method's to check (``QuantMethod.check_config``)."""
    known: dict[str, Any] = {k: cfg.settings[k] for k in DEFAULTS if k in cfg.settings}
    semantics = cfg.settings.get("weight_scale_semantics", "inverse")
    if semantics is not None and semantics != "inverse":
        raise QuantConfigError(
            f"weight_scale_semantics: lowbit writes FP8 scales as 'inverse' (the reference's), found {semantics!r}"
        )
    block = known.get("weight_block_size")
    if block is not None:
        if (
            not isinstance(block, (list, tuple))
            or len(block) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in block)
        ):
            raise QuantConfigError(f"weight_block_size: expected [rows, cols] of positive integers, found {block!r}")
        known["weight_block_size"] = (int(block[0]), int(block[1]))
        known.setdefault("weight_scale_method", "block")
    scale_method = known.get("weight_scale_method", "row")
    if scale_method not in FP8_SCALE_METHODS:
        raise QuantConfigError(f"weight_scale_method: expected one of {FP8_SCALE_METHODS}, found {scale_method!r}")
    if (scale_method == "block") != (known.get("weight_block_size") is not None):
        raise QuantConfigError(
            f"weight_scale_method {scale_method!r} with weight_block_size {known.get('weight_block_size')!r}: "
            "'block' needs weight_block_size [rows, cols], the other methods take none"
        )
    size = known.get("block_size", 64)
    if isinstance(size, bool) or not isinstance(size, int) or size < 32 or size > 4096 or size & (size - 1):
        raise QuantConfigError(f"block_size: expected a power of two in 32..4096, found {size!r}")
    return {**DEFAULTS, **known}
