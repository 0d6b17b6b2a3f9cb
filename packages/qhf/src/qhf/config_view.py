"""Reading a resolved :class:`~qformats.config.QuantizeConfig` (one :func:`qhf.quant_config.read_quantize_config`
returned, or a checkpoint's): the run's method, its kind, and its settings by name.

These are plain functions over the config, not a second config type: the values live in the config itself
(``meta["algorithm"]``, ``settings``), where the reader resolved them.
"""

from __future__ import annotations

from typing import Any

from qformats.config import QuantizeConfig
from qformats.enums import METHOD

from .methods import QuantMethod, find_method, get_method


def algorithm(cfg: QuantizeConfig) -> str:
    """The run's method as the user named it: ``meta["algorithm"]`` when it names a registered method
    (:mod:`qhf.methods`: ``rtn``, ``gptq``, ``awq``, ``qqq``, ``paroquant``, ``fp8``, ``bitsandbytes``, ``gguf``
    and installed third-party methods), else the config's method (a checkpoint family lowbit reads but does not
    write, e.g. ``vptq``, or a third-party method's checkpoint read without it)."""
    named = cfg.meta.get("algorithm")
    if find_method(named) is not None:
        return str(named)
    return cfg.method.value if isinstance(cfg.method, METHOD) else str(cfg.method)


def method_of(cfg: QuantizeConfig) -> QuantMethod:
    """The :class:`~qhf.methods.QuantMethod` of the run's method (:func:`algorithm`); a method lowbit does not
    quantize with raises :class:`~qhf.methods.MethodError` naming it and the known ones."""
    return get_method(algorithm(cfg))


def is_weight_only(cfg: QuantizeConfig) -> bool:
    """FP8 / bitsandbytes / GGUF: quantized from the weight alone (:mod:`qhf.weight_only`)."""
    method = find_method(algorithm(cfg))
    return method is not None and method.weight_only


def needs_calibration(cfg: QuantizeConfig) -> bool:
    """Whether a run of ``cfg`` reads calibration rows (:meth:`qhf.methods.QuantMethod.needs_calibration`): every
    calibrated method, and RTN while a ``bits_budget`` is still to be resolved into ``dynamic`` rules (its
    sensitivity pass reads them; :mod:`qhf.mixed_precision`)."""
    return method_of(cfg).needs_calibration(cfg)


def bits_budget(cfg: QuantizeConfig) -> float | None:
    """The ``bits_budget`` (stored bits per weight) of a mixed-precision config, else None."""
    value = cfg.settings.get("bits_budget")
    return float(value) if value is not None else None


def needs_allocation(cfg: QuantizeConfig) -> bool:
    """A ``bits_budget`` whose widths are not chosen yet: no ``dynamic`` rules (a saved config carries its rules
    and is reproduced as given)."""
    return bits_budget(cfg) is not None and cfg.rules is None


def checkpoint_method(cfg: QuantizeConfig) -> str:
    """The method written to the checkpoint (:meth:`qhf.methods.QuantMethod.checkpoint_method`): RTN, GPTQ on
    AWQ-scaled weights (``awq_scales``) and third-party integer methods export as the family their format belongs
    to; the others as themselves."""
    return method_of(cfg).checkpoint_method(cfg)


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
    """A weight-only config's stored per-module overrides (GGUF: rule key -> ``{"bits", "format"}``), else None
    (``QuantMethod.stored_dynamic``)."""
    return method_of(cfg).stored_dynamic(cfg)


def rotation(cfg: QuantizeConfig) -> dict[str, Any] | None:
    """The resolved folded-rotation setting (``{"kind", "seed", "residual", "heads"}``, :mod:`qhf.rotation.setting`)
    when the run rotates, else None (kind ``none``, or a config without the setting)."""
    value = cfg.settings.get("rotation")
    if not isinstance(value, dict) or value.get("kind", "none") == "none":
        return None
    return dict(value)
