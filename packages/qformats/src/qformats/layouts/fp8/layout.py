"""FP8 module tensors and config: ``weight`` (FP8 codes), ``weight_scale_inv`` (float32), ``bias``.

Config fields (the reference's names): ``format`` (or DeepSeek's ``fmt``), ``weight_scale_method``
(``tensor`` | ``row`` | ``block``; default ``row``, and ``block`` when only ``weight_block_size`` is
given), ``weight_block_size`` (``[rows, cols]``) and ``weight_scale_semantics`` (``inverse`` |
``multiplier``). The semantics is never guessed from the scale values: a config that does not say
raises :class:`FP8ScaleAmbiguityError` unless the caller passes ``semantics=`` explicitly.

FP8 codes are not ``scales * (codes - zeros)`` integers, so FP8 is not in the layout registry; these
functions are its interface. numpy has no float8 dtype: ``weight`` travels as uint8 bit patterns here,
and :mod:`qformats.layouts.fp8.torch_adapter` views them as torch float8 tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import ConfigError, LayoutError
from ...violations import Violation
from .formats import fp8_format
from .logical import SCALE_METHODS, SEMANTICS, FP8Weight, scale_shape


class FP8ScaleAmbiguityError(ConfigError):
    """``weight_scale_semantics`` is missing: dividing and multiplying are both plausible."""


def scale_semantics(config: Mapping[str, Any], semantics: str | None = None) -> str:
    """``"inverse"`` or ``"multiplier"``: the explicit argument wins, else the config must say."""
    declared = config.get("weight_scale_semantics")
    chosen = semantics if semantics is not None else declared
    if chosen is None:
        raise FP8ScaleAmbiguityError(
            "weight_scale_semantics: the config does not say whether weight_scale_inv divides ('inverse', "
            "the reference toolkit) or multiplies ('multiplier', DeepSeek-style); refusing to guess from the "
            "values. Pass semantics='inverse' or 'multiplier' explicitly."
        )
    if chosen not in SEMANTICS:
        raise ConfigError(f"weight_scale_semantics: expected one of {SEMANTICS}, found {chosen!r}")
    if semantics is not None and declared is not None and semantics != declared:
        raise ConfigError(f"weight_scale_semantics: config says {declared!r}, caller says {semantics!r}")
    return str(chosen)


def scheme_from_config(config: Mapping[str, Any]) -> tuple[str, str, tuple[int, int] | None]:
    """(format, weight_scale_method, weight_block_size) with the reference's defaults and checks."""
    fmt = fp8_format(str(config.get("format") or config.get("fmt") or "float8_e4m3fn")).name
    raw_block = config.get("weight_block_size")
    block = None
    if raw_block is not None:
        if not isinstance(raw_block, (list, tuple)) or len(raw_block) != 2:
            raise ConfigError(f"weight_block_size: expected [rows, cols], found {raw_block!r}")
        block = (int(raw_block[0]), int(raw_block[1]))
    method = config.get("weight_scale_method")
    if method is None:
        method = "block" if block is not None else "row"
    if method not in SCALE_METHODS:
        raise ConfigError(f"weight_scale_method: expected one of {SCALE_METHODS}, found {method!r}")
    if block is not None and method != "block":
        raise ConfigError(f"weight_block_size is set but weight_scale_method is {method!r} (expected 'block')")
    if method == "block" and block is None:
        raise ConfigError("weight_scale_method 'block' needs weight_block_size [rows, cols]")
    return fmt, str(method), block


def pack_fp8(weight: FP8Weight) -> dict[str, np.ndarray]:
    """``{"weight": uint8 codes [out, in], "weight_scale_inv": float32}`` (copies; input untouched)."""
    return {"weight": weight.codes.copy(), "weight_scale_inv": weight.scale_inv.copy()}


def validate_fp8(tensors: Mapping[str, np.ndarray], config: Mapping[str, Any]) -> list[Violation]:
    """Every broken rule of the FP8 module tensors under ``config`` (semantics not required here)."""
    try:
        _, method, block = scheme_from_config(config)
    except ConfigError as exc:
        return [Violation("FP8-CONFIG", "<config>", "a valid FP8 scheme", str(exc))]
    found: list[Violation] = []
    weight, scale = tensors.get("weight"), tensors.get("weight_scale_inv")
    if weight is None or scale is None:
        missing = [n for n in ("weight", "weight_scale_inv") if tensors.get(n) is None]
        return [Violation("FP8-MISSING", n, "present", "absent") for n in missing]
    if weight.ndim != 2 or weight.dtype.itemsize != 1:
        found.append(Violation("FP8-WEIGHT", "weight", "2-D 8-bit codes", f"{weight.dtype} {weight.shape}"))
        return found
    try:
        expected = scale_shape(method, weight.shape, block)
    except LayoutError as exc:
        return [Violation("FP8-BLOCK", "weight", f"divisible by {block}", str(exc))]
    if scale.shape != expected:
        found.append(Violation("FP8-SCALE-SHAPE", "weight_scale_inv", f"{expected} for {method}", str(scale.shape)))
    if scale.dtype != np.float32:
        found.append(Violation("FP8-SCALE-DTYPE", "weight_scale_inv", "float32", str(scale.dtype)))
    elif scale.size and not (np.isfinite(scale).all() and (scale != 0).all()):
        found.append(Violation("FP8-SCALE-VALUE", "weight_scale_inv", "finite and non-zero", "zero, inf or nan"))
    return found


def unpack_fp8(tensors: Mapping[str, np.ndarray], config: Mapping[str, Any], semantics: str | None = None) -> FP8Weight:
    """Read module tensors as an :class:`FP8Weight`; raises on any violation or unknown semantics."""
    chosen = scale_semantics(config, semantics)
    problems = validate_fp8(tensors, config)
    if problems:
        raise LayoutError("; ".join(str(p) for p in problems))
    fmt, method, block = scheme_from_config(config)
    codes = np.ascontiguousarray(tensors["weight"]).view(np.uint8)
    return FP8Weight(codes, np.asarray(tensors["weight_scale_inv"]), fmt, method, block, chosen)
