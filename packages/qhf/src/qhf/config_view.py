"""Reading a resolved :class:`~qformats.config.QuantizeConfig` (one :func:`qhf.quant_config.read_quantize_config`
returned, or a checkpoint's): the run's method, its kind, and its settings by name.

These are plain functions over the config, not a second config type: the values live in the config itself
(``meta["algorithm"]``, ``settings``), where the reader resolved them.
"""

from __future__ import annotations

from typing import Any

from qformats.config import QuantizeConfig
from qformats.config.quantizer_formats import QUANTIZER_FORMATS, WEIGHT_ONLY_METHODS
from qformats.enums import METHOD


def algorithm(cfg: QuantizeConfig) -> str:
    """The run's method as the user named it: ``meta["algorithm"]`` when it names a lowbit quantizer (``rtn``,
    ``gptq``, ``awq``, ``qqq``, ``paroquant``, ``fp8``, ``bitsandbytes``, ``gguf``), else the config's method (a
    checkpoint family lowbit reads but does not write, e.g. ``vptq``)."""
    named = cfg.meta.get("algorithm")
    if named in QUANTIZER_FORMATS:
        return str(named)
    return cfg.method.value if isinstance(cfg.method, METHOD) else str(cfg.method)


def is_weight_only(cfg: QuantizeConfig) -> bool:
    """FP8 / bitsandbytes / GGUF: quantized from the weight alone (:mod:`qhf.weight_only`)."""
    return algorithm(cfg) in WEIGHT_ONLY_METHODS


def needs_calibration(cfg: QuantizeConfig) -> bool:
    """Whether a run of ``cfg`` reads calibration rows: every calibrated method, and RTN while a ``bits_budget``
    is still to be resolved into ``dynamic`` rules (its sensitivity pass reads them; :mod:`qhf.mixed_precision`)."""
    if is_weight_only(cfg):
        return False
    return algorithm(cfg) != "rtn" or needs_allocation(cfg)


def bits_budget(cfg: QuantizeConfig) -> float | None:
    """The ``bits_budget`` (stored bits per weight) of a mixed-precision config, else None."""
    value = cfg.settings.get("bits_budget")
    return float(value) if value is not None else None


def needs_allocation(cfg: QuantizeConfig) -> bool:
    """A ``bits_budget`` whose widths are not chosen yet: no ``dynamic`` rules (a saved config carries its rules
    and is reproduced as given)."""
    return bits_budget(cfg) is not None and cfg.rules is None


def checkpoint_method(cfg: QuantizeConfig) -> str:
    """The method written to the checkpoint: RTN, and GPTQ on AWQ-scaled weights (``awq_scales``), export as the
    family their format belongs to."""
    method = algorithm(cfg)
    if method != "rtn" and not (method == "gptq" and awq_scales(cfg)):
        return method
    return "awq" if cfg.format in QUANTIZER_FORMATS["awq"] else "gptq"


def setting(cfg: QuantizeConfig, name: str) -> Any:
    """A resolved setting (``damp_percent``, ``act_group_aware``, ``weight_block_size`` ...); raises ``KeyError``
    naming it when the config was not resolved by :func:`~qhf.quant_config.read_quantize_config` for this kind
    of method."""
    try:
        return cfg.settings[name]
    except KeyError:
        raise KeyError(f"{name}: not a resolved setting of this {algorithm(cfg)} config") from None


def solver_variant(cfg: QuantizeConfig) -> tuple[str, dict[str, float]] | None:
    """``("gptaq", {"alpha"})`` or ``("foem", {"alpha", "beta"})`` when one is set, else None."""
    for name in ("gptaq", "foem"):
        values = cfg.settings.get(name)
        if values is not None:
            return name, dict(values)
    return None


def awq_scales(cfg: QuantizeConfig) -> bool:
    """Whether GPTQ solves AWQ-scaled weights (the ``awq_scales`` setting; qlooper's ``awq_gptq``)."""
    return bool(cfg.settings.get("awq_scales"))


def adapter(cfg: QuantizeConfig) -> dict[str, Any] | None:
    """The EoRA ``adapter`` (``{"name": "lora", "path", "rank"}``), else None."""
    value = cfg.settings.get("adapter")
    return dict(value) if value is not None else None


def gguf_dynamic(cfg: QuantizeConfig) -> dict[str, dict[str, Any]] | None:
    """A GGUF config's per-module overrides (rule key -> ``{"bits", "format"}``), else None."""
    if algorithm(cfg) != "gguf" or cfg.rules is None:
        return None
    from .gguf_settings import gguf_dynamic as checked

    return checked(cfg.rules.to_mapping()) or None


def rotation(cfg: QuantizeConfig) -> dict[str, Any] | None:
    """The resolved folded-rotation setting (``{"kind", "seed", "residual", "heads"}``, :mod:`qhf.rotation.setting`)
    when the run rotates, else None (kind ``none``, or a config without the setting)."""
    value = cfg.settings.get("rotation")
    if not isinstance(value, dict) or value.get("kind", "none") == "none":
        return None
    return dict(value)
