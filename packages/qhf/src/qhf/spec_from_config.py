"""The qalgos specs of a run, built from its resolved :class:`~qformats.config.QuantizeConfig` (the one config;
see :func:`qhf.quant_config.read_quantize_config`).

:func:`quant_spec` gives the run's spec: qalgos' ``QuantSpec`` for the calibrated methods (GPTQ family, AWQ,
RTN, QQQ), ``ParoSpec`` for ParoQuant (:mod:`qhf.paroquant_settings`), ``WeightOnlySpec`` for FP8 /
bitsandbytes / GGUF (:mod:`qhf.weight_only`), whatever a third-party method builds (:mod:`qhf.methods`).
:func:`module_specs` gives the modules whose spec differs from the run's after the config's per-module overrides
(``QuantizeConfig.for_module``).
"""

from __future__ import annotations

from typing import Any

from qformats.config import QuantizeConfig

from .config_view import method_of


def quant_spec(cfg: QuantizeConfig) -> Any:
    """The run's qalgos spec (module docstring): :meth:`qhf.methods.QuantMethod.spec` of the config's method.
    ``QuantSpec`` scales are rounded to float16 as solved so the checkpoint is exact (QQQ keeps float32 scales: it
    splits them into its two scale levels, :mod:`qalgos.qqq`)."""
    return method_of(cfg).spec(cfg)


def module_specs(cfg: QuantizeConfig, modules: list[str]) -> dict[str, Any]:
    """``{module: spec}`` for the ``modules`` (full dotted names) whose spec differs from :func:`quant_spec`'s
    after the config's per-module overrides (``QuantizeConfig.for_module``), by the config's method
    (:meth:`qhf.methods.QuantMethod.module_specs`): a GGUF config's ``dynamic`` types
    (:func:`qhf.weight_only.module_specs`); for the integer methods a rule's ``bits``, ``group_size``, ``sym`` and
    ``desc_act`` (a mixed-precision run's widths, :mod:`qhf.mixed_precision`; :func:`integer_module_specs`). A
    module a negative rule names is left to the run's spec here. ParoQuant and the other weight-only methods
    quantize every module alike."""
    return method_of(cfg).module_specs(cfg, modules)


def integer_module_specs(cfg: QuantizeConfig, base: Any, modules: list[str]) -> dict[str, Any]:
    """The integer methods' per-module specs: ``base`` (the run's qalgos ``QuantSpec``) with each module's rule
    ``bits`` / ``group_size`` / ``sym`` / ``desc_act`` (group-aware order kept only without ``desc_act``), for the
    modules where that differs from ``base``."""
    from dataclasses import replace

    out = {}
    for name in modules:
        own = cfg.for_module(name)
        if own is None:
            continue
        spec = replace(
            base,
            bits=own.bits,
            group_size=own.group_size,
            sym=own.sym,
            desc_act=own.desc_act,
            act_group_aware=base.act_group_aware and not own.desc_act,
        )
        if spec != base:
            out[name] = spec
    return out
